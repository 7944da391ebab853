package status

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func sample() Snapshot {
	return Snapshot{
		Version: "test", Fabric: "sim", Started: time.Unix(1700000000, 0).UTC(),
		Devices: []Device{{
			Name: "sim0", Node: "/dev/infiniband/ucm0", NodeGUID: "0002:c903:0000:0001",
			Ports:    []Port{{Num: 1, LinkLayer: "Ethernet", State: "ACTIVE", GID0: "fe80::1"}},
			Counters: MADCounter{Sent: 7, Received: 5, Retransmitted: 1, TimedOut: 0, Dropped: 2, SendFailed: 3},
			Errors:   map[string]uint64{"EINVAL": 3, "ENOMEM": 1},
			Files: []File{{PID: 4242, UID: 1000, Comm: "dapltest", Events: 1, Waiting: 3, CopyWaiting: 2, IDs: []ID{
				{ID: 3, State: "ESTABLISHED", ServiceID: 0x0200000000001234, Port: 1, LocalQPN: 0x11, RemoteQPN: 0x12,
					LocalCommID: 0xabcd, RemoteCommID: 0x9876, RemoteGID: "fe80::2", Events: 1},
				{ID: 4, State: "LISTEN", ServiceID: 0x99},
			}}},
		}, {
			Name: "sim1", Node: "/dev/infiniband/ucm1", NodeGUID: "0002:c903:0000:0002",
			Ports: []Port{{Num: 1, LinkLayer: "Ethernet", State: "ACTIVE", GID0: "fe80::2"}},
		}},
		Limits: Limits{MemoryCharged: 3 << 19, MemoryBudget: 512 << 20, Refused: map[string]uint64{"user-waits": 800, "max-ids": 2},
			Copies: 16, CopiesMax: 1024,
			Users: []User{{UID: 1000, Files: 1, IDs: 2, Timewait: 1, Events: 1, Waiting: 3, Memory: 5376}, {UID: 65534, Files: 2, IDs: 0, Waiting: 200, Copies: 16, Memory: 2 << 20}}},
	}
}

func TestServeAndFetch(t *testing.T) {
	dir := t.TempDir()
	want := sample()
	s, err := Listen(dir, ProviderFunc(func() Snapshot { return want }), nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, SocketName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	// A second daemon on the same directory is refused, the first keeps serving.
	if _, err := Listen(dir, ProviderFunc(sample), nil); err == nil || !strings.Contains(err.Error(), "another ucmd") {
		t.Fatalf("second Listen: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := Fetch(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Devices[0].Files[0].IDs[0] != want.Devices[0].Files[0].IDs[0] || got.Devices[0].Counters != want.Devices[0].Counters {
		t.Fatalf("fetched %+v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Fetch(ctx, dir); err == nil || !strings.Contains(err.Error(), "is ucmd serve running") {
		t.Fatalf("Fetch after Close: %v", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SocketName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(dir, ProviderFunc(sample), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, sample()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{"sim0", "/dev/infiniband/ucm0", "dapltest", "ESTABLISHED", "0x0200000000001234",
		"0x0000abcd", "0x00009876", "fe80::2", "0x11", "EINVAL=3,ENOMEM=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	// Every table is aligned over all its rows: in each block (lines
	// between blank lines), every column starts at the header's offset,
	// whether or not a device has an open file.
	for _, block := range strings.Split(out, "\n\n")[1:] {
		lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
		starts := columnStarts(lines[0])
		for _, l := range lines[1:] {
			for _, c := range starts {
				if c > 0 && (c >= len(l) || l[c-1] != ' ' || l[c] == ' ') {
					t.Errorf("column at %d not aligned in %q (header %q)", c, l, lines[0])
				}
			}
		}
	}
	tables := strings.Split(out, "\n\n")
	// The budget, and what each user holds against the limits.
	if lines := strings.Split(strings.TrimRight(tables[3], "\n"), "\n"); len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "MEMORY-CHARGED") ||
		strings.Join(strings.Fields(lines[1]), " ") != "1.5MiB 512.0MiB 16/1024 2 max-ids=2,user-waits=800" {
		t.Errorf("budget table:\n%s", tables[3])
	}
	if lines := strings.Split(strings.TrimRight(tables[4], "\n"), "\n"); len(lines) != 3 ||
		!strings.HasPrefix(lines[0], "UID") ||
		strings.Join(strings.Fields(lines[1]), " ") != "1000 1 2 1 1 3 0 5.2KiB" ||
		strings.Join(strings.Fields(lines[2]), " ") != "65534 2 0 0 0 200 16 2.0MiB" {
		t.Errorf("user table:\n%s", tables[4])
	}
	// The file table: its opener, ids, queued events and waiting commands.
	if lines := strings.Split(strings.TrimRight(tables[5], "\n"), "\n"); len(lines) != 2 ||
		!strings.Contains(lines[0], "QUEUED  WAITING  FOR-COPY") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "sim0 4242 1000 dapltest 2 1 3 2 ") {
		t.Errorf("file table:\n%s", tables[5])
	}
	// The id table: a header and one line per id.
	if lines := strings.Split(strings.TrimRight(tables[6], "\n"), "\n"); len(lines) != 3 ||
		!strings.HasPrefix(lines[0], "DEV") || !strings.Contains(lines[0], "RGID") {
		t.Errorf("id table:\n%s", tables[6])
	}
}

// A RoCE port's neighbour resolutions: a table of their own, shown only
// when some port counts them.
func TestWriteTextNeighbours(t *testing.T) {
	s := sample()
	var b bytes.Buffer
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "PEERS-RESOLVED") {
		t.Errorf("a neighbour table without a RoCE port:\n%s", b.String())
	}
	s.Devices[0].Ports[0].Neighbours = &Neighbours{Resolved: 12, Failed: 3, Unanswered: 1, Error: "rtnetlink: operation not permitted"}
	b.Reset()
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
	var table string
	for _, tb := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(tb, "PEERS-RESOLVED") {
			table = tb
		}
	}
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "DEV PORT PEERS-RESOLVED UNREACHABLE NOT-ASKED WHY-NOT" ||
		strings.Join(strings.Fields(lines[1]), " ") != "sim0 1 12 3 1 rtnetlink: operation not permitted" {
		t.Errorf("neighbour table:\n%s", table)
	}
	j, err := json.Marshal(s.Devices[0].Ports[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := `"neighbours":{"resolved":12,"failed":3,"unanswered":1,"error":"rtnetlink: operation not permitted"}`; !strings.Contains(string(j), want) {
		t.Errorf("port JSON %s lacks %s", j, want)
	}
}

func columnStarts(header string) []int {
	var starts []int
	for i := range header {
		if header[i] != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	return starts
}

func TestJSONHex(t *testing.T) {
	b, err := json.Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"service_id":"0x0200000000001234"`) {
		t.Fatalf("service id not a hex string: %s", b)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Devices[0].Files[0].IDs[0]; got != sample().Devices[0].Files[0].IDs[0] {
		t.Fatalf("round trip: %+v", got)
	}
	if back.Devices[0].Errors["EINVAL"] != 3 {
		t.Fatalf("errors: %v", back.Devices[0].Errors)
	}
	// A number still decodes (an older daemon); garbage does not.
	var h Hex64
	if err := json.Unmarshal([]byte("4660"), &h); err != nil || h != 0x1234 {
		t.Fatalf("number: %v %v", h, err)
	}
	if err := json.Unmarshal([]byte(`"0xzz"`), &h); err == nil {
		t.Fatal("garbage decoded")
	}
}

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		devs, ids  int
		users      int // the limits' users; all of sample's (2) unless uid
		wantErrStr string
	}{
		{args: nil, devs: 2, ids: 2, users: 2},
		{args: []string{"dev", "ucm0"}, devs: 1, ids: 2},
		{args: []string{"dev", "sim1"}, devs: 1, ids: 0},
		{args: []string{"dev", "/dev/infiniband/ucm0", "state", "established"}, devs: 1, ids: 1},
		{args: []string{"pid", "4242", "state", "LISTEN"}, devs: 2, ids: 1},
		{args: []string{"pid", "1"}, devs: 2, ids: 0},
		{args: []string{"state", "TIMEWAIT"}, devs: 2, ids: 0},
		{args: []string{"uid", "1000"}, devs: 2, ids: 2, users: 1},
		{args: []string{"uid", "0"}, devs: 2, ids: 0, users: 0}, // root, not all
		{args: []string{"uid", "65534", "dev", "ucm0"}, devs: 1, ids: 0, users: 1},
		{args: []string{"uid", "-1"}, wantErrStr: "not a user id"},
		{args: []string{"uid", "4294967296"}, wantErrStr: "not a user id"},
		{args: []string{"dev"}, wantErrStr: "needs a value"},
		{args: []string{"pid", "x"}, wantErrStr: "not a process id"},
		{args: []string{"qpn", "1"}, wantErrStr: "unknown filter"},
		{args: []string{"state", "establised"}, wantErrStr: `state "establised": not a CM state (idle, listen, req_sent`},
	} {
		f, err := ParseFilter(tc.args)
		if tc.wantErrStr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrStr) {
				t.Errorf("%v: err %v", tc.args, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		got := f.Apply(sample())
		ids := 0
		for _, d := range got.Devices {
			for _, fl := range d.Files {
				ids += len(fl.IDs)
			}
		}
		users := 2
		if tc.users != 0 || slices.Contains(tc.args, "uid") {
			users = tc.users
		}
		if len(got.Devices) != tc.devs || ids != tc.ids || len(got.Limits.Users) != users {
			t.Errorf("%v: %d devices, %d ids, %d users; want %d, %d, %d", tc.args, len(got.Devices), ids, len(got.Limits.Users), tc.devs, tc.ids, users)
		}
	}
}

func TestSocketGroup(t *testing.T) {
	dir := t.TempDir()
	gid := os.Getgid() // a group we may chown to without root
	s, err := Listen(dir, ProviderFunc(sample), nil, WithGroup(gid))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(filepath.Join(dir, SocketName))
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Gid) != gid {
		t.Fatalf("socket group: %+v", fi.Sys())
	}
}

// A device filter that names nothing the daemon has is an error, not
// empty tables.
func TestFilterCheckDevice(t *testing.T) {
	s := sample()
	s.Unserved = []Unserved{{Name: "mlx5_1"}}
	for _, dev := range []string{"", "ucm0", "/dev/infiniband/ucm0", "mlx5_1"} {
		if err := (Filter{Dev: dev}).CheckDevice(s); err != nil {
			t.Errorf("dev %q: %v", dev, err)
		}
	}
	if err := (Filter{Dev: "ucm9"}).CheckDevice(s); err == nil || !strings.Contains(err.Error(), `dev "ucm9": no such device or node (ucmd has `) || !strings.Contains(err.Error(), "mlx5_1 (not served)") {
		t.Errorf("dev ucm9: %v", err)
	}
}

// Devices found but not served: a device filter keeps those it names,
// a file or id filter none; the text has a row for each.
func TestUnserved(t *testing.T) {
	s := sample()
	s.Unserved = []Unserved{{Name: "mlx5_1", Reason: "CM class in use", Since: time.Unix(100, 0), NextTry: time.Unix(104, 0)}}
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, 1}, {[]string{"dev", "mlx5_1"}, 1}, {[]string{"dev", "ucm0"}, 0}, {[]string{"pid", "4242"}, 0}} {
		f, err := ParseFilter(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Apply(s).Unserved; len(got) != tc.want {
			t.Errorf("%v: unserved %+v, want %d", tc.args, got, tc.want)
		}
	}
	var b bytes.Buffer
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "NOT-SERVED") || !strings.Contains(b.String(), "mlx5_1      1970-01-01T00:01:40Z  1970-01-01T00:01:44Z  CM class in use") {
		t.Errorf("text:\n%s", b.String())
	}
	if err := WriteText(&b, sample()); err != nil || strings.Count(b.String(), "NOT-SERVED") != 1 {
		t.Errorf("a table of unserved devices with none: %v\n%s", err, b.String())
	}
}

// fakeListener hands out its errors, then one end of a pipe, then
// net.ErrClosed.
type fakeListener struct {
	errs []error
	conn net.Conn
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	if c := l.conn; c != nil {
		l.conn = nil
		return c, nil
	}
	return nil, net.ErrClosed
}
func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return &net.UnixAddr{Name: "fake", Net: "unix"} }

// An accept error other than the listener's close, such as running out
// of descriptors, does not end the loop: the socket serves again once
// the error passes.
func TestAcceptLoopOutlivesErrors(t *testing.T) {
	c, peer := net.Pipe()
	defer peer.Close()
	emfile := &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	ln := &fakeListener{errs: []error{emfile, emfile, emfile}, conn: c}
	var logs bytes.Buffer
	var wg sync.WaitGroup
	served := 0
	AcceptLoop(ln, 1, &wg, slog.New(slog.NewTextHandler(&logs, nil)), "test socket", func(c net.Conn) {
		served++
		c.Close()
	})
	wg.Wait()
	if served != 1 {
		t.Fatalf("served %d connections after three EMFILE errors, want 1", served)
	}
	if n := strings.Count(logs.String(), "too many open files"); n != 3 {
		t.Errorf("%d of the three errors logged:\n%s", n, logs.String())
	}
}

// AcceptLoop serves at most its limit of connections at once; the next
// waits, unanswered, until one of them ends.
func TestAcceptLoopLimit(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	release := make(chan struct{})
	go AcceptLoop(ln, 2, &wg, slog.New(slog.DiscardHandler), "test socket", func(c net.Conn) {
		defer c.Close()
		io.WriteString(c, "hello\n")
		<-release
	})
	defer func() { ln.Close(); close(release); wg.Wait() }()
	greeted := func(c net.Conn, within time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(within))
		b := make([]byte, 6)
		_, err := io.ReadFull(c, b)
		return err == nil
	}
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i, c := range conns[:2] {
		if !greeted(c, 10*time.Second) {
			t.Fatalf("connection %d within the limit of 2 not served", i+1)
		}
	}
	if greeted(conns[2], 200*time.Millisecond) {
		t.Fatal("a third connection past the limit of 2 was served")
	}
	release <- struct{}{} // one of the first two ends
	if !greeted(conns[2], 10*time.Second) {
		t.Fatal("the third connection not served after one of the first two ended")
	}
}

// Clients that ask at once get their snapshots one after another, each
// taken after its request arrived: however many connect, the daemon walks
// its ids once at a time.
func TestServerOneSnapshotAtATime(t *testing.T) {
	var in, most atomic.Int32
	p := ProviderFunc(func() Snapshot {
		n := in.Add(1)
		defer in.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		// Long enough for the other requests to arrive meanwhile.
		time.Sleep(20 * time.Millisecond)
		return sample()
	})
	dir := t.TempDir()
	s, err := Listen(dir, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if snap, err := Fetch(ctx, dir); err != nil || snap.Version != "test" {
				t.Errorf("fetch: %+v, %v", snap.Version, err)
			}
		})
	}
	wg.Wait()
	if n := most.Load(); n != 1 {
		t.Errorf("%d snapshots taken at once, want 1", n)
	}
}

// No client can connect before the socket has its mode: it is bound out of
// reach and renamed into place once set. Bound in place, it took the
// umask's mode until the chmod after it, and a client that connected in
// between was served. Closed, the listener removes it.
func TestSocketModeBeforeReachable(t *testing.T) {
	dir := t.TempDir()
	saved := afterBind
	t.Cleanup(func() { afterBind = saved })
	connected := false
	afterBind = func(path string) {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			connected = true
		}
	}
	ln, err := ListenSocket(dir, "x.sock")
	if err != nil {
		t.Fatal(err)
	}
	if connected {
		t.Error("a client connected before the socket's mode was set")
	}
	path := filepath.Join(dir, "x.sock")
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket: %v, %v; want a socket of mode 0600", st, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the runtime dir holds %d entries, want the socket alone", len(ents))
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Errorf("connect after ListenSocket: %v", err)
	} else {
		c.Close()
	}
	ln.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket after Close: %v, want it removed", err)
	}
}

// A client that asks again and again gets a fresh snapshot each time, but
// the snapshots (a walk of every id under the files' locks) take at most
// about a tenth of the daemon's time: the next begins no sooner than ten
// times the last one's time after it.
func TestSnapshotsBounded(t *testing.T) {
	dir := t.TempDir()
	const walk = 2 * time.Millisecond
	var snaps atomic.Int64
	srv, err := Listen(dir, ProviderFunc(func() Snapshot {
		snaps.Add(1)
		time.Sleep(walk)
		return sample()
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	start := time.Now()
	for range 20 {
		if _, err := Fetch(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	if n, most := snaps.Load(), int64(elapsed/(10*walk))+1; n != 20 || n > most {
		t.Errorf("%d snapshots for 20 fetches in %v, want 20, and at most %d in that time", n, elapsed, most)
	}
}
