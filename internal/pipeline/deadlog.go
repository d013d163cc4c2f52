package pipeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/counterd/counterd/internal/pipeline/stream"
)

// deadLog keeps the embedded mode's dead letters in a file of the data
// directory, one JSON dead letter a line (the body a stream's dead-letter
// topic would hold), synced before the batch is answered, so they survive
// a restart. When the file passes maxBytes it is renamed to path+".1"
// (replacing the one before) and a new one started: the newest dead
// letters are kept, between maxBytes and twice that on disk. Safe for
// concurrent use; Close closes the file.
type deadLog struct {
	path     string
	maxBytes int64

	mu   sync.Mutex // guards f and size
	f    *os.File
	size int64
}

// defaultDeadLogBytes bounds one dead-letter file.
const defaultDeadLogBytes = 64 << 20

func openDeadLog(path string, maxBytes int64) (*deadLog, error) {
	l := &deadLog{path: path, maxBytes: maxBytes}
	if err := l.openLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *deadLog) openLocked() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pipeline: dead letters: %w", err)
	}
	st, err := f.Stat()
	if err == nil && st.Size() > 0 {
		// A crash in the middle of a write leaves a torn last line: end
		// it, so that the next dead letter starts a line of its own.
		last := make([]byte, 1)
		if _, err = f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			_, err = f.Write([]byte{'\n'})
		}
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("pipeline: dead letters: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Append writes dls (read from source) and syncs the file.
func (l *deadLog) Append(source string, dls []stream.DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	var b []byte
	for i := range dls {
		b = append(b, stream.EncodeDeadLetter(source, &dls[i])...)
		b = append(b, '\n')
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.size > 0 && l.size+int64(len(b)) > l.maxBytes {
		if err := l.rotateLocked(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	if err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		return fmt.Errorf("pipeline: dead letters: %w", err)
	}
	return nil
}

func (l *deadLog) rotateLocked() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("pipeline: dead letters: %w", err)
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return fmt.Errorf("pipeline: dead letters: %w", err)
	}
	return l.openLocked()
}

// Last returns the newest n dead letters, oldest first.
func (l *deadLog) Last(n int) ([]json.RawMessage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []json.RawMessage
	for _, p := range []string{l.path, l.path + ".1"} {
		lines, err := readLines(p)
		if err != nil {
			return nil, err
		}
		out = append(lines[max(0, len(lines)-(n-len(out))):], out...)
		if len(out) >= n {
			break
		}
	}
	return out, nil
}

func readLines(path string) ([]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline: dead letters: %w", err)
	}
	var out []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		if line := sc.Bytes(); json.Valid(line) { // a torn last line after a crash is skipped
			out = append(out, json.RawMessage(bytes.Clone(line)))
		}
	}
	return out, nil
}

// Close closes the file. Safe to call twice.
func (l *deadLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
