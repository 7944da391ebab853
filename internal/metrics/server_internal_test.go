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
	"sync"
	"sync/atomic"
	"syscall"
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

// request starts a GET of /; an empty line after it ends its headers.
const request = "GET / HTTP/1.1\r\nHost: ucmd\r\n"

// get sends one request for / on c and reads its response, within a
// deadline far beyond what a loopback request takes.
func get(c net.Conn) (*http.Response, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, request+"\r\n"); err != nil {
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
	lim.grace = time.Hour // a slow machine must not see the holders closed as silent
	addr := serve(t, lim)
	// In the middle of a request (its headers not yet all sent), each
	// holds a slot.
	holders := []net.Conn{dial(t, addr), dial(t, addr)}
	for i, c := range holders {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\n"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	third := dial(t, addr)
	if _, err := io.WriteString(third, request+"\r\n"); err != nil {
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
	if _, err := io.WriteString(c, request+"X-Pad: "+strings.Repeat("a", 64<<10)+"\r\n\r\n"); err != nil {
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

// countingProvider counts its snapshots; each waits for release, if set.
type countingProvider struct {
	n       atomic.Int32
	release chan struct{}
}

func (p *countingProvider) Snapshot() status.Snapshot {
	p.n.Add(1)
	if p.release != nil {
		<-p.release
	}
	return status.Snapshot{Version: "v"}
}

// Scrapes share one snapshot until it is maxAge old, and scrapes that
// arrive while one is being taken wait for it instead of taking their
// own: whoever reaches the endpoint cannot make the daemon walk its ids
// faster than that.
func TestSnapshotShared(t *testing.T) {
	p := &countingProvider{}
	c := &snapshotCollector{p: p, maxAge: time.Hour}
	for range 10 {
		if s := c.snapshot(); s.Version != "v" {
			t.Fatalf("snapshot %+v", s)
		}
	}
	if n := p.n.Load(); n != 1 {
		t.Errorf("10 scrapes within maxAge took %d snapshots, want 1", n)
	}
	c.maxAge = 0
	for range 10 {
		c.snapshot()
	}
	if n := p.n.Load(); n != 11 {
		t.Errorf("10 scrapes with maxAge 0 took %d snapshots, want 10 more", n-1)
	}

	p = &countingProvider{release: make(chan struct{})}
	c = &snapshotCollector{p: p, maxAge: time.Hour}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { c.snapshot() })
	}
	for p.n.Load() == 0 { // the first scrape is taking its snapshot
		time.Sleep(time.Millisecond)
	}
	close(p.release)
	wg.Wait()
	if n := p.n.Load(); n != 1 {
		t.Errorf("8 scrapes at once took %d snapshots, want 1", n)
	}
}

// Connections left idle between requests (a scraper's, or anyone's who
// reaches the address) do not keep the others out: with every slot taken,
// the one idle the longest is closed.
func TestServerEvictsIdleConnections(t *testing.T) {
	lim := defaultLimits
	lim.conns = 2
	lim.grace = time.Hour // only the idle one may go, however slow the dials
	addr := serve(t, lim)
	holders := []net.Conn{dial(t, addr), dial(t, addr)}
	for i, c := range holders { // served, then idle: each holds a slot
		if r, err := get(c); err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: GET /: %v, %v", i, r, err)
		}
		time.Sleep(10 * time.Millisecond) // the first is idle the longer
	}
	third := dial(t, addr)
	third.SetDeadline(time.Now().Add(10 * time.Second))
	if r, err := get(third); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("a third connection with two idle ones holding the limit of 2: %v, %v", r, err)
	}
	holders[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := holders[0].Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("the connection idle the longest: read %d bytes, %v; want it closed (EOF)", n, err)
	}
}

// Connections that never finish a request hold no slot against a scraper
// past the grace: a scrape gets through long before the header limit.
func TestServerEvictsSilentConnections(t *testing.T) {
	lim := defaultLimits
	lim.conns = 2
	lim.header = time.Minute
	lim.grace = 50 * time.Millisecond
	addr := serve(t, lim)
	silent := []net.Conn{dial(t, addr), dial(t, addr)}
	io.WriteString(silent[1], "GET / HTTP/1.1\r\n") // and no more
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if r, err := get(c); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("a scrape with two silent connections holding the limit of 2: %v, %v", r, err)
	}
	for i, s := range silent {
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := s.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("silent connection %d: read %d bytes, %v; want it closed (EOF)", i, n, err)
		}
	}
}

// The endpoint binds an address the host does not have yet (the unit
// starts ucmd before the network) and says so; on every address it warns
// that the endpoint has no authentication.
func TestListenAddressNotYetConfigured(t *testing.T) {
	m := New(status.ProviderFunc(func() status.Snapshot { return status.Snapshot{} }))
	for _, c := range []struct{ addr, warn string }{
		{"192.0.2.10:0", "not on this host yet"}, // TEST-NET-1: no host has it
		{"[2001:db8::10]:0", "not on this host yet"},
		{":0", "every address"},
		{"127.0.0.1:0", ""},
	} {
		var logged strings.Builder
		log := slog.New(slog.NewTextHandler(&logged, nil))
		s, err := listen(c.addr, m, log, defaultLimits)
		if err != nil {
			if strings.Contains(c.addr, "[") && errors.Is(err, syscall.EAFNOSUPPORT) {
				continue // no IPv6 here
			}
			t.Errorf("listen %s: %v", c.addr, err)
			continue
		}
		s.Close()
		if c.warn == "" && logged.Len() > 0 || !strings.Contains(logged.String(), c.warn) {
			t.Errorf("listen %s logged %q, want a warning with %q", c.addr, logged.String(), c.warn)
		}
	}
}
