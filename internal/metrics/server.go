package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"
)

// Path is where the metrics are served.
const Path = "/metrics"

// CheckAddr checks a --metrics-listen value by itself: HOST:PORT with a
// port number (0 picks a free one); an empty HOST listens on every
// address.
func CheckAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-listen %q: want HOST:PORT, such as 127.0.0.1:9435: %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("--metrics-listen %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}

// freebind lets the endpoint bind an address the host does not have yet
// (IP_FREEBIND, which Linux honours for IPv6 sockets too): the unit
// starts ucmd before the network, as it must hold the CM class before
// rdma-load-modules loads ib_cm, and a management address may come up
// later. A failed bind there would fail the start, and with it the
// ordering that keeps ib_cm off the ports. Connections arrive once the
// address does. Best effort: where the option is refused, a bind to a
// configured address still works.
func freebind(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
	})
}

// warnAddr says what an operator should know about the address bound: an
// endpoint without authentication on every address, or on one this host
// does not have (yet).
func warnAddr(log *slog.Logger, a net.Addr) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return
	}
	if ta.IP.IsUnspecified() {
		log.Warn("the metrics endpoint listens on every address and has no authentication; bind a loopback or management address", "addr", a.String())
		return
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok && n.IP.Equal(ta.IP) {
			return
		}
	}
	log.Warn("the metrics address is not on this host yet; the endpoint answers once it is", "addr", a.String())
}

// Server serves m's Handler at Path on one TCP address.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	idle *idleConns
	done chan struct{}
}

// limits bound what one client of the endpoint costs the daemon. The
// daemon runs as root, and whoever reaches the address may connect (there
// is no authentication): without them a local user could hold a goroutine
// and a descriptor for every connection it leaves open after a request.
// Scrapers send one small request at a time and keep the connection
// between scrapes, a minute apart by Prometheus' default.
type limits struct {
	conns       int           // connections served at once; more wait in the kernel's backlog
	header      time.Duration // to read a request's headers
	read, write time.Duration // a whole request, a whole response
	idle        time.Duration // between two requests on one connection
	grace       time.Duration // before a connection still sending its first request may be closed for another
	headerBytes int
}

var defaultLimits = limits{
	conns:       32,
	header:      10 * time.Second,
	read:        30 * time.Second,
	write:       30 * time.Second,
	idle:        2 * time.Minute,
	grace:       time.Second,
	headerBytes: 16 << 10,
}

// Listen serves m on addr (HOST:PORT) until Close.
func Listen(addr string, m *Metrics, log *slog.Logger) (*Server, error) {
	return listen(addr, m, log, defaultLimits)
}

func listen(addr string, m *Metrics, log *slog.Logger, lim limits) (*Server, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: freebind}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	warnAddr(log, ln.Addr())
	ln = netutil.LimitListener(ln, lim.conns)
	idle := &idleConns{max: lim.conns, grace: lim.grace, open: make(map[net.Conn]connIdle)}
	mux := http.NewServeMux()
	mux.Handle(Path, m.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "ucmd: metrics at %s\n", Path)
	})
	s := &Server{
		ln: ln,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: lim.header,
			ReadTimeout:       lim.read,
			WriteTimeout:      lim.write,
			IdleTimeout:       lim.idle,
			MaxHeaderBytes:    lim.headerBytes,
			ConnState:         idle.track,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		idle: idle,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint failed", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return s, nil
}

// idleConns closes the connection idle the longest whenever every
// connection the endpoint serves at once is open: a scraper keeps its
// connection between scrapes, and so may anyone who reaches the address,
// who could otherwise hold every slot idle for the idle limit (two
// minutes), or silent before its first request for the header limit, and
// keep Prometheus waiting in the backlog past its scrape timeout (10 s by
// default). A connection whose request has not all arrived counts as idle
// once it has been open for the grace, which no scraper on a working
// network needs to send its request; one whose request is being answered
// is never closed.
type idleConns struct {
	max     int
	grace   time.Duration
	mu      sync.Mutex
	open    map[net.Conn]connIdle
	timer   *time.Timer // armed while every slot is held by connections still in their grace
	stopped bool        // the server has stopped: arm nothing more
}

type connIdle struct {
	since time.Time // accepted, or last request answered
	fresh bool      // its first request has not all arrived
	busy  bool      // a request is being answered
}

func (t *idleConns) track(c net.Conn, st http.ConnState) {
	t.mu.Lock()
	switch st {
	case http.StateNew:
		t.open[c] = connIdle{since: time.Now(), fresh: true}
	case http.StateIdle:
		t.open[c] = connIdle{since: time.Now()}
	case http.StateActive:
		t.open[c] = connIdle{busy: true}
	case http.StateHijacked, http.StateClosed:
		delete(t.open, c)
	}
	oldest := t.evictLocked(c)
	t.mu.Unlock()
	if oldest != nil {
		oldest.Close()
	}
}

// evictLocked picks the connection to close when every slot is held (not
// keep), and takes it out of the table; if none may be closed yet, it
// arms the timer for when the first one's grace ends.
func (t *idleConns) evictLocked(keep net.Conn) net.Conn {
	if len(t.open) < t.max {
		return nil
	}
	now := time.Now()
	var oldest net.Conn
	var since, wait time.Time
	for o, at := range t.open {
		switch {
		case o == keep || at.busy:
		case at.fresh && now.Sub(at.since) < t.grace:
			if end := at.since.Add(t.grace); wait.IsZero() || end.Before(wait) {
				wait = end
			}
		case oldest == nil || at.since.Before(since):
			oldest, since = o, at.since
		}
	}
	if oldest != nil {
		delete(t.open, oldest)
		return oldest
	}
	if !wait.IsZero() && t.timer == nil && !t.stopped {
		t.timer = time.AfterFunc(wait.Sub(now), func() {
			t.mu.Lock()
			t.timer = nil
			oldest := t.evictLocked(nil)
			t.mu.Unlock()
			if oldest != nil {
				oldest.Close()
			}
		})
	}
	return nil
}

// stop ends the timer, once the server has stopped.
func (t *idleConns) stop() {
	t.mu.Lock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.mu.Unlock()
}

// Addr is the address served (the port chosen for port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops serving: scrapes in progress get a second to finish.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	s.idle.stop()
	return err
}
