package pipeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/counterd/counterd/internal/pipeline/stream"
)

// TestDeadLog: dead letters survive reopening, a torn last line (a crash
// in the middle of a write) costs only itself, and rotation keeps the
// newest.
func TestDeadLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.ndjson")
	l, err := openDeadLog(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	dl := func(i int) stream.DeadLetter {
		return stream.DeadLetter{Record: stream.Record{Offset: int64(i), Value: fmt.Appendf(nil, `{"id":"e%d"}`, i)}, Reason: "r"}
	}
	if err := l.Append("http", []stream.DeadLetter{dl(0), dl(1)}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte(`{"source":"http","offs`)) // torn
	f.Close()
	if l, err = openDeadLog(path, 600); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 2; i < 12; i++ {
		if err := l.Append("http", []stream.DeadLetter{dl(i)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Last(1000)
	if err != nil {
		t.Fatal(err)
	}
	offsets := func(ms []json.RawMessage) (out []int64) {
		for _, m := range ms {
			var d struct{ Offset int64 }
			json.Unmarshal(m, &d)
			out = append(out, d.Offset)
		}
		return out
	}
	o := offsets(got)
	if len(o) < 4 || o[len(o)-1] != 11 {
		t.Fatalf("offsets %v: want the newest, ending with 11", o)
	}
	for i := 1; i < len(o); i++ {
		if o[i] != o[i-1]+1 {
			t.Fatalf("offsets %v: a gap or a torn line", o)
		}
	}
	if last, _ := l.Last(2); fmt.Sprint(offsets(last)) != "[10 11]" {
		t.Fatalf("Last(2) = %v", offsets(last))
	}
	if st, err := os.Stat(path + ".1"); err != nil || st.Size() > 600 {
		t.Fatalf("rotated file: %v %v", st, err)
	}
}
