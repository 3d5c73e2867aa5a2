package agentlog

import (
	"context"
	"errors"
	"io"
	"testing"
)

// Records are waited on in order, each once; Index looks at all of them; a log that ends
// says so to whoever still waits.
func TestWaitTakesRecordsInOrder(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	var seen []string
	l := New(func(rec map[string]any) { seen = append(seen, rec["msg"].(string)) })
	done := make(chan struct{})
	go func() { l.Read(r); close(done) }()
	ctx := context.Background()
	go func() {
		_, _ = io.WriteString(w, `{"msg":"step started","run":"a"}`+"\n"+`not json`+"\n"+`{"msg":"step started","run":"b"}`+"\n")
		_ = w.Close()
	}()
	if rec, err := l.Wait(ctx, "step started", "run", "b"); err != nil || rec["run"] != "b" {
		t.Fatalf("waiting for b: %v %v", rec, err)
	}
	if _, err := l.Wait(ctx, "step started", "run", "a"); !errors.Is(err, ErrEnded) {
		t.Fatalf("a was consumed on the way to b, and the log ended: %v", err)
	}
	<-done
	if l.Index("step started", "run", "a") != 0 || l.Index("not json") != 1 || l.Record(1)["raw"] != true {
		t.Fatalf("index: %d %d, raw %v", l.Index("step started", "run", "a"), l.Index("not json"), l.Record(1))
	}
	if len(seen) != 3 {
		t.Fatalf("seen %v", seen)
	}
}
