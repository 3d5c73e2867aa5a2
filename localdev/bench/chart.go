package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// writeChart draws the throughputs side by side, on a log scale (they span two orders of
// magnitude), as a PNG.
func writeChart(path string, b *bench) error {
	bars := []struct {
		name string
		key  string
		c    color.RGBA
	}{
		{"Mediator submit -> 201", "submit 201", color.RGBA{0x1f, 0x77, 0xb4, 0xff}},
		{"Mediator submit -> 202", "submit 202", color.RGBA{0x1f, 0x77, 0xb4, 0xff}},
		{"Mediator lifecycle (runs)", "lifecycle", color.RGBA{0x2c, 0xa0, 0x2c, 0xff}},
		{"River insert (jobs)", "river insert", color.RGBA{0xff, 0x7f, 0x0e, 0xff}},
		{"River end-to-end (jobs)", "river e2e", color.RGBA{0xff, 0x7f, 0x0e, 0xff}},
		{"pgbench TPC-B (tx, 8 clients)", "pgbench TPC-B 8", color.RGBA{0x7f, 0x7f, 0x7f, 0xff}},
		{"pgbench simple-update (tx, 8 clients)", "pgbench simple-update 8", color.RGBA{0x7f, 0x7f, 0x7f, 0xff}},
	}
	const w, rowH, left, top = 960, 34, 230, 40
	h := top + rowH*len(bars) + 30
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, img.Bounds(), color.RGBA{0xff, 0xff, 0xff, 0xff})
	text(img, 10, 22, "Throughput per second, log scale - "+b.machine)
	maxV := 1.0
	for _, bar := range bars {
		maxV = math.Max(maxV, b.rates[bar.key])
	}
	scale := float64(w-left-120) / math.Log10(maxV*1.2)
	for i, bar := range bars {
		v := b.rates[bar.key]
		y := top + i*rowH
		text(img, 10, y+20, bar.name)
		length := 0
		if v > 1 {
			length = int(math.Log10(v) * scale)
		}
		fill(img, image.Rect(left, y+6, left+length, y+rowH-6), bar.c)
		text(img, left+length+8, y+20, fmt.Sprintf("%.0f/s", v))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func text(img *image.RGBA, x, y int, s string) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(color.Black), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
