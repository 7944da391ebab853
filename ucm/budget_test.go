package ucm_test

import (
	"encoding/binary"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/ucmd/ucmd/internal/syncbuf"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/conformance/fakedut"
	"github.com/ucmd/ucmd/ucm"
)

// Issue 12.3: limits per user (uid) across files, and a daemon-wide
// memory budget. Past one, the command fails and nothing already held is
// lost; another user is not affected by a user's limits.

// clientAs opens a file on d as uid (and gid) uid.
func clientAs(t *testing.T, d *fakedut.DUT, uid uint32) *conformance.Client {
	t.Helper()
	saved := d.Caller
	d.Caller.Uid, d.Caller.Gid = uid, uid
	defer func() { d.Caller = saved }()
	c, err := conformance.NewClient(d, false)
	must(t, err)
	return c
}

// The id limit is per user, over all of its files: a user at its limit
// gets ENOMEM on any of them, keeps what it has, and another user can still
// create ids.
func TestUserIDLimit(t *testing.T) {
	d := fakedut.New(t, &fakedut.Options{Limits: ucm.Limits{UserIDs: 3}})
	a1, a2 := clientAs(t, d, 1000), clientAs(t, d, 1000)
	var ids []uint32
	for _, c := range []*conformance.Client{a1, a2, a1} {
		id, err := c.CreateID(0)
		must(t, err)
		ids = append(ids, id)
	}
	_, err := a2.CreateID(0)
	wantErrno(t, "CREATE_ID past the user's limit, on its second file", err, unix.ENOMEM)
	_, err = a1.CreateID(0)
	wantErrno(t, "CREATE_ID past the user's limit", err, unix.ENOMEM)
	for i, id := range ids {
		c := a1
		if i == 1 {
			c = a2
		}
		if _, err := c.AttrID(id); err != nil {
			t.Errorf("ATTR_ID of id %d held before the limit: %v", id, err)
		}
	}
	b := clientAs(t, d, 2000)
	for range 3 {
		if _, err := b.CreateID(0); err != nil {
			t.Fatalf("another user's CREATE_ID: %v", err)
		}
	}
	if _, err := a1.DestroyID(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := a2.CreateID(0); err != nil {
		t.Errorf("CREATE_ID once an id was destroyed: %v", err)
	}
	must(t, a2.Close())
	if ids := d.Device.Budget().User(1000).IDs; ids != 1 {
		t.Errorf("user 1000 holds %d ids after closing a file, want 1", ids)
	}
}

// The open-file limit is per user, and answers EMFILE.
func TestUserFileLimit(t *testing.T) {
	d := fakedut.New(t, &fakedut.Options{Limits: ucm.Limits{UserFiles: 2}})
	a1 := clientAs(t, d, 1000)
	clientAs(t, d, 1000)
	saved := d.Caller
	d.Caller.Uid = 1000
	_, err := d.Open(false)
	d.Caller = saved
	wantErrno(t, "third open of the user", err, unix.EMFILE)
	b := clientAs(t, d, 2000)
	if _, err := b.CreateID(0); err != nil {
		t.Errorf("another user's file: %v", err)
	}
	if _, err := a1.CreateID(0); err != nil {
		t.Errorf("a file opened before the limit: %v", err)
	}
	must(t, a1.Close())
	clientAs(t, d, 1000) // a slot is free again
}

// A REQ flood into a listener that never reads: past the user's event
// limit every REQ is answered with REJ (consumer defined), the listener's
// queue and ids stop growing, the CM keeps nothing of the rejected
// connections, and the REQs queued before the limit are all delivered.
func TestREQFloodRejectedAtUserEventLimit(t *testing.T) {
	const limit, flood = 20, 100
	d := fakedut.New(t, &fakedut.Options{Limits: ucm.Limits{UserEvents: limit}})
	path, _ := d.LoopbackPath()
	b := clientAs(t, d, 2000) // the listener's user
	l, err := b.CreateID(0xb0)
	must(t, err)
	must(t, b.Listen(l, 0x1000, 0))
	a := clientAs(t, d, 1000) // the flooder, reading its REJs (same limit)
	for i := range flood {
		id, err := a.CreateID(uint64(i))
		must(t, err)
		must(t, a.SendREQ(a.REQ(id, 0x1000, path, 0x100+id)))
		if i < limit {
			continue
		}
		ev, err := a.Expect(abi.CMREJReceived, wait)
		must(t, err)
		if ev.ID != id || ev.U.REJ().Reason != 28 {
			t.Fatalf("REJ for id %d reason %d, want %d and 28", ev.ID, ev.U.REJ().Reason, id)
		}
	}
	if u := d.Device.Budget().User(2000); u.IDs != 1+limit || u.Events != limit {
		t.Errorf("listener's user holds %d ids and %d events, want %d and %d", u.IDs, u.Events, 1+limit, limit)
	}
	if n, _ := d.CM.Count(); n != flood+1+limit {
		t.Errorf("the CM holds %d ids, want %d: rejected connections must leave nothing", n, flood+1+limit)
	}
	for range limit {
		if _, err := b.Expect(abi.CMREQReceived, wait); err != nil {
			t.Fatal(err)
		}
	}
	if events := d.Device.Budget().User(2000).Events; events != 0 {
		t.Errorf("%d events still charged after delivery", events)
	}
}

// The memory budget is daemon-wide: once it is spent, CREATE_ID gets
// ENOMEM, open gets ENOMEM, and what is held keeps working; freeing makes
// room again.
func TestMemoryBudget(t *testing.T) {
	// Room for two files and a few ids (the file and id costs are the
	// budget's own estimates, about 2 KiB and 640 B).
	d := fakedut.New(t, &fakedut.Options{Limits: ucm.Limits{MemoryBudget: 2*2048 + 3*640}})
	a, b := clientAs(t, d, 1000), clientAs(t, d, 2000)
	var ids []uint32
	for {
		id, err := a.CreateID(0)
		if err != nil {
			wantErrno(t, "CREATE_ID past the budget", err, unix.ENOMEM)
			break
		}
		ids = append(ids, id)
		if len(ids) > 10 {
			t.Fatal("the budget never ran out")
		}
	}
	if len(ids) == 0 {
		t.Fatal("no id fitted")
	}
	if _, err := b.CreateID(0); conformance.Errno(err) != unix.ENOMEM {
		t.Errorf("another user's CREATE_ID with the budget spent: %v, want ENOMEM", err)
	}
	saved := d.Caller
	d.Caller.Uid = 3000
	_, err := d.Open(false)
	d.Caller = saved
	wantErrno(t, "open with the budget spent", err, unix.ENOMEM)
	for _, id := range ids {
		if _, err := a.AttrID(id); err != nil {
			t.Errorf("ATTR_ID of a held id: %v", err)
		}
	}
	if _, err := a.DestroyID(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateID(0); err != nil {
		t.Errorf("CREATE_ID after an id was freed: %v", err)
	}
	must(t, a.Close())
	must(t, b.Close())
	if u := d.Device.Budget().Usage(); u.Bytes != 0 || u.Users != 0 {
		t.Errorf("budget after every file closed: %+v, want nothing charged", u)
	}
}

// The defaults admit 10,000 REQs queued at one listener that does not read
// yet (a busy server's accept backlog), and then deliver them all.
func TestDefaultsAdmit10000QueuedREQs(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 commands")
	}
	const n = 10_000
	d := fakedut.New(t, nil)
	path, _ := d.LoopbackPath()
	b := clientAs(t, d, 2000)
	l, err := b.CreateID(0xb0)
	must(t, err)
	must(t, b.Listen(l, 0x1000, 0))
	a := clientAs(t, d, 1000)
	fa := fake(a)
	resp := a.Mem.Alloc(abi.CreateIDRespSize)
	create := conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{Response: resp})
	for i := range n {
		if _, errno := fa.F.Write(fa.Caller, create); errno != 0 {
			t.Fatalf("CREATE_ID %d: %v", i, errno)
		}
		id := binary.NativeEndian.Uint32(a.Mem.Read(resp, 4))
		req := a.REQ(id, 0x1000, path, 0x100+id)
		// The fake DUT's clock is the real one: a response timeout of
		// 2.3 hours keeps a slow machine's REQs from timing out (REQ_ERROR
		// for the active side) before the test reads them.
		req.RemoteCMResponseTimeout = 31
		must(t, a.SendREQ(req))
	}
	for {
		events := d.Device.Budget().User(2000).Events
		if events == n {
			break
		}
		time.Sleep(10 * time.Millisecond) // the test's own deadline bounds it
	}
	if err := fake(a).SetNonblock(true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetEvent(); conformance.Errno(err) != unix.EAGAIN {
		t.Fatalf("the active side got %v, want no event (no REJ)", err)
	}
	for i := range n {
		if _, err := b.GetEvent(); err != nil {
			t.Fatalf("GET_EVENT %d: %v", i, err)
		}
	}
}

// Every refusal by a limit is counted by the limit's flag name, and
// logged: at Warn for the first of each limit, naming the knob and the
// uid, at Debug for the next ones (a client past its limit retries in a
// loop). Budget.Users lists what each user holds.
func TestRefusalsCountedAndLogged(t *testing.T) {
	var logs syncbuf.Buffer
	d := fakedut.New(t, &fakedut.Options{Limits: ucm.Limits{UserIDs: 3, MaxIDs: 2},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	b := d.Device.Budget()
	if r := b.Refusals(); r != nil {
		t.Fatalf("refusals before any: %v", r)
	}
	a1, a2 := clientAs(t, d, 1000), clientAs(t, d, 1000)
	for range 2 {
		_, err := a1.CreateID(0)
		must(t, err)
	}
	_, err := a1.CreateID(0)
	wantErrno(t, "CREATE_ID past --max-ids", err, unix.ENOMEM)
	_, err = a2.CreateID(0)
	must(t, err)
	for range 3 {
		_, err = a2.CreateID(0)
		wantErrno(t, "CREATE_ID past --user-ids", err, unix.ENOMEM)
	}
	clientAs(t, d, 2000)

	want := map[string]uint64{"max-ids": 1, "user-ids": 3}
	if got := b.Refusals(); !maps.Equal(got, want) {
		t.Errorf("refusals %v, want %v", got, want)
	}
	// Each user's share of the memory budget adds up to the budget's use.
	wantUsers := []ucm.UserUsage{{UID: 1000, Files: 2, IDs: 3}, {UID: 2000, Files: 1}}
	got := b.Users()
	var bytes int64
	for i := range got {
		if got[i].Bytes <= 0 {
			t.Errorf("uid %d is charged %d bytes", got[i].UID, got[i].Bytes)
		}
		bytes += got[i].Bytes
		got[i].Bytes = 0
	}
	if !slices.Equal(got, wantUsers) {
		t.Errorf("users %+v, want %+v", got, wantUsers)
	}
	if all := b.Usage().Bytes; bytes != all {
		t.Errorf("users charged %d bytes in all, the budget %d", bytes, all)
	}
	out := logs.String()
	for _, tc := range []struct {
		level, limit string
		n            int
	}{{"WARN", "--max-ids", 1}, {"WARN", "--user-ids", 1}, {"DEBUG", "--user-ids", 2}, {"DEBUG", "--max-ids", 0}} {
		re := regexp.MustCompile(`level=` + tc.level + ` msg="ucm: a limit refused a user" limit=` + tc.limit + ` max=\d+ uid=1000 `)
		if n := len(re.FindAllString(out, -1)); n != tc.n {
			t.Errorf("%d %s lines of %s refusals, want %d:\n%s", n, tc.level, tc.limit, tc.n, out)
		}
	}
}
