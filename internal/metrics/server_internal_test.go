package metrics

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ucmd/ucmd/internal/status"
)

// serve starts the endpoint with lim on a free loopback port.
func serve(t *testing.T, lim limits) string {
	t.Helper()
	m := New(status.ProviderFunc(func() status.Snapshot { return status.Snapshot{} }))
	s, err := listen("127.0.0.1:0", m, slog.New(slog.DiscardHandler), lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one request for / on c and reads its response, within a
// deadline far beyond what a loopback request takes.
func get(c net.Conn) (*http.Response, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: ucmd\r\n\r\n"); err != nil {
		return nil, err
	}
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r, err
}

// A connection left open after a request is closed by the server once it
// has been idle for the idle limit, not held for ever.
func TestServerClosesIdleConnections(t *testing.T) {
	lim := defaultLimits
	lim.idle = 100 * time.Millisecond
	c := dial(t, serve(t, lim))
	if r, err := get(c); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %v, %v", r, err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("an idle connection was still open after 10 s, 100 times the idle limit")
	}
	if n != 0 || err != io.EOF {
		t.Fatalf("read on the idle connection: %d bytes, %v; want the server's close (EOF)", n, err)
	}
}

// Past the connection limit the endpoint accepts no more until one
// closes: the rest wait in the kernel's backlog, not in the daemon.
func TestServerConnectionLimit(t *testing.T) {
	lim := defaultLimits
	lim.conns = 2
	addr := serve(t, lim)
	holders := []net.Conn{dial(t, addr), dial(t, addr)}
	for i, c := range holders { // accepted and served: each holds a slot
		if r, err := get(c); err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: GET /: %v, %v", i, r, err)
		}
	}
	third := dial(t, addr)
	if _, err := io.WriteString(third, "GET / HTTP/1.1\r\nHost: ucmd\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := third.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection past a limit of 2 was answered: %d bytes, %v", n, err)
	}
	holders[0].Close()
	third.SetReadDeadline(time.Now().Add(10 * time.Second))
	r, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatalf("the third connection, after one of the two closed: %v", err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("the third connection: %s", r.Status)
	}
}

// Headers past the limit are refused (431) instead of read into memory.
func TestServerHeaderLimit(t *testing.T) {
	addr := serve(t, defaultLimits)
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: ucmd\r\nX-Pad: "+strings.Repeat("a", 64<<10)+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Only the status line: the server resets the connection soon after,
	// for the headers it left unread.
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET / with 64 KiB of headers: %v", err)
	}
	if r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("GET / with 64 KiB of headers: %s, want 431", r.Status)
	}
	if r, err := get(dial(t, addr)); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("GET / after it: %v, %v", r, err)
	}
}
