package ucm

import "testing"

func TestIDTableLowestFree(t *testing.T) {
	tab := NewIDTable()
	f := &file{}
	ctxs := make([]*ucmCtx, 5)
	for i := range ctxs {
		ctxs[i] = &ucmCtx{file: f}
		if err := tab.alloc(ctxs[i]); err != nil {
			t.Fatal(err)
		}
		if ctxs[i].id != uint32(i) {
			t.Fatalf("id %d, want %d", ctxs[i].id, i)
		}
	}
	tab.release(ctxs[3])
	tab.release(ctxs[1])
	tab.release(ctxs[1]) // twice: harmless
	for _, want := range []uint32{1, 3, 5} {
		c := &ucmCtx{file: f}
		if err := tab.alloc(c); err != nil {
			t.Fatal(err)
		}
		if c.id != want {
			t.Errorf("id %d, want %d", c.id, want)
		}
	}
	if n := tab.Len(); n != 6 {
		t.Errorf("Len %d, want 6", n)
	}
}

func TestIDTableShrinksFromTop(t *testing.T) {
	tab := NewIDTable()
	f := &file{}
	var cs []*ucmCtx
	for range 4 {
		c := &ucmCtx{file: f}
		if err := tab.alloc(c); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for i := len(cs) - 1; i >= 0; i-- {
		tab.release(cs[i])
	}
	if tab.next != 0 || tab.free.Len() != 0 {
		t.Errorf("next %d, %d free entries: want an empty table", tab.next, tab.free.Len())
	}
}

// Rules 1 and 4: an id is found only once published, only by its own
// file (another file gets EINVAL), and not once removed.
func TestIDTableVisibility(t *testing.T) {
	tab := NewIDTable()
	mine, other := &file{}, &file{}
	c := &ucmCtx{file: mine}
	if err := tab.alloc(c); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.get(mine, c.id); errnoOf(err) != "ENOENT" {
		t.Errorf("hidden id: %v, want ENOENT", err)
	}
	tab.publish(c)
	if _, err := tab.get(other, c.id); errnoOf(err) != "EINVAL" {
		t.Errorf("other file: %v, want EINVAL", err)
	}
	x, err := tab.get(mine, c.id)
	if err != nil {
		t.Fatal(err)
	}
	x.put()
	if _, err := tab.remove(mine, c.id); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.get(mine, c.id); errnoOf(err) != "ENOENT" {
		t.Errorf("removed id: %v, want ENOENT", err)
	}
	if d := &(ucmCtx{file: mine}); tab.alloc(d) == nil && d.id == c.id {
		t.Errorf("id %d reused while still being destroyed", d.id)
	}
}

func TestValidateListen(t *testing.T) {
	for _, tc := range []struct {
		sid, mask uint64
		ok        bool
	}{
		{0x1000, ^uint64(0), true},
		{0x0000000001000000, ^uint64(0), false},
		{0x0000000001ffffff, ^uint64(0), false},
		{0x0000000000010000, ^uint64(0), false},
		{0x000000000001ffff, ^uint64(0), false},
		{0x0000000001000000, 0, true},           // the raw mask is applied: 0 passes
		{0x0000000001000000, 0xff000000, false}, // sid&mask still in range
		{0x0000000002000000, ^uint64(0), true},
	} {
		if err := validateListen(tc.sid, tc.mask); (err == nil) != tc.ok {
			t.Errorf("validateListen(%#x, %#x) = %v, want ok=%v", tc.sid, tc.mask, err, tc.ok)
		}
	}
}
