package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
)

// view is one screenshot: the address, the view it renders, and what must be on the page
// first (a JavaScript condition) so the picture shows the view at work.
type view struct {
	file, path, name, ready string
}

var views = []view{
	{"fleet.png", "/console/", "fleet", `document.querySelectorAll('#nodes tbody tr').length === 8 && document.querySelectorAll('#nodes td.lease a').length === 4`},
	{"queue.png", "/console/queue", "queue", `document.querySelector('#queue .waiting .badge')`},
	{"runs.png", "/console/runs", "runs", `document.querySelectorAll('#runs tbody tr').length >= 7`},
	{"run.png", "/console/runs/soak-7?owner=client:bob", "run", `(document.querySelector('pre[data-log=soak]')?.textContent ?? '').includes('soak tick 4:')`},
	{"node.png", "/console/nodes/rpi-1", "node", `document.querySelector('#node-leases tbody tr')`},
}

func screenshots(ctx context.Context, base string, a *agents, b *browser, dir string) error {
	sims, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	if err := seed(sims, base, a, &wg); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tab, done, err := b.tab(base, "dev-admin")
	if err != nil {
		return err
	}
	defer done()
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1280, 800)); err != nil {
		return err
	}
	for _, v := range views {
		err := chromedp.Do(tab,
			chromedp.Navigate(base+v.path),
			void(chromedp.Poll[bool](`document.body.dataset.rendered === `+strconv.Quote(v.name)+` && !!(`+v.ready+`)`, chromedp.WithPollingInterval(50*time.Millisecond))),
		)
		var png []byte
		if err == nil {
			png, err = chromedp.Run(tab, chromedp.CaptureScreenshot())
		}
		if err != nil {
			return fmt.Errorf("%s: %w", v.file, err)
		}
		if err := os.WriteFile(filepath.Join(dir, v.file), png, 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %s (%d KiB)\n", filepath.Join(dir, v.file), v.path, len(png)/1024)
	}
	return nil
}
