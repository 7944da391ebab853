package ucm

import "testing"

// The two calls that end an id kept for its timewait refund it once,
// whichever comes first, and leave no count of ids in timewait behind:
// the release hook once crossed teardown between its mark and its count,
// leaving the user an entry holding one id in timewait and nothing else.
func TestLingeredEitherOrder(t *testing.T) {
	for _, hookFirst := range []bool{false, true} {
		d, h, req := openDirect(t, Config{})
		f := h.(*file)
		uid := req.Caller.Uid
		base := d.budget.User(uid)
		c := &ucmCtx{file: f, cmID: d.cm.CreateID(d.handler)}
		if err := f.addCtx(c); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.unlinkCtx(c)
		f.mu.Unlock()
		if !d.ids.release(c) {
			t.Fatal("id not allocated")
		}
		first, second := true, false // teardown, then the hook
		if hookFirst {
			first, second = false, true
		}
		f.lingered(c, first)
		mid := d.budget.User(uid)
		if want := base.Timewait + boolInt(!hookFirst); mid.IDs != base.IDs+1 || mid.Timewait != want {
			t.Errorf("hook first %v, after the first call: %d ids, %d in timewait; want %d and %d", hookFirst, mid.IDs, mid.Timewait, base.IDs+1, want)
		}
		f.lingered(c, second)
		if end := d.budget.User(uid); end != base {
			t.Errorf("hook first %v, after both calls: %+v, want what was held before, %+v", hookFirst, end, base)
		}
		c.cmID.Destroy()
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
