package journal_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/internal/journal"
)

func streamOf(t *testing.T, f *os.File) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

func TestIsStream(t *testing.T) {
	dir := t.TempDir()
	a, err := os.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Create(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		env  string
		f    *os.File
		want bool
	}{
		{streamOf(t, a), a, true},
		{streamOf(t, a), b, false}, // inherited from a parent whose stderr it was
		{"", a, false},
		{"garbage", a, false},
	} {
		t.Setenv("JOURNAL_STREAM", tc.env)
		if got := journal.IsStream(tc.f); got != tc.want {
			t.Errorf("JOURNAL_STREAM=%q, %s: IsStream %v, want %v", tc.env, filepath.Base(tc.f.Name()), got, tc.want)
		}
	}
}

// Every line starts with its record's priority, once, and has no time;
// derived loggers (With, WithGroup) keep the prefix.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: journal.DropTime}
	log := slog.New(journal.NewHandler(&buf, slog.NewTextHandler(&buf, opts)))
	log.Debug("d")
	log.With("dev", "rxe0").Info("i")
	log.WithGroup("g").Warn("w", "k", 1)
	log.Error("e")
	want := []string{
		"<7>level=DEBUG msg=d",
		"<6>level=INFO msg=i dev=rxe0",
		"<4>level=WARN msg=w g.k=1",
		"<3>level=ERROR msg=e",
	}
	if got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Records logged at once from many goroutines, through loggers derived
// from one another, never put a prefix between another record's prefix
// and its line.
func TestHandlerConcurrent(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(journal.NewHandler(&buf, slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: journal.DropTime})))
	var wg sync.WaitGroup
	for g := range 8 {
		l := log.With("g", g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if i%2 == 0 {
					l.Warn("w", "i", i)
				} else {
					l.Info("i", "i", i)
				}
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200)
	}
	for _, l := range lines {
		if !(strings.HasPrefix(l, "<4>level=WARN ") || strings.HasPrefix(l, "<6>level=INFO ")) || strings.Count(l, "<") != 1 {
			t.Fatalf("line %q", l)
		}
	}
}
