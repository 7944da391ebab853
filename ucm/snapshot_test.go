package ucm_test

import (
	"testing"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/conformance/fakedut"
)

// Files is what `ucmd status` shows: open files with their live ids, states
// and queued events; closed files disappear.
func TestFilesSnapshot(t *testing.T) {
	e := newEnv(t, nil)
	if n := len(e.d.Device.Files()); n != 2 {
		t.Fatalf("%d files, want 2", n)
	}
	id := e.req(t, 0xa1)
	e.waitReadable(t, e.b) // the REQ is queued on b's listener

	var listener, active *struct{ f, id int }
	files := e.d.Device.Files()
	for fi, f := range files {
		if f.PID != fakedut.Pid {
			t.Errorf("file %d: pid %d, want the opener's %d", fi, f.PID, fakedut.Pid)
		}
		for ii, x := range f.IDs {
			switch x.ID {
			case e.listener:
				listener = &struct{ f, id int }{fi, ii}
			case id:
				active = &struct{ f, id int }{fi, ii}
			}
		}
	}
	if listener == nil || active == nil {
		t.Fatalf("ids missing from %+v", files)
	}
	l := files[listener.f].IDs[listener.id]
	if l.State != cmcore.StateListen || l.ServiceID != e.sid || l.QueuedEvents != 1 || files[listener.f].QueuedEvents != 1 {
		t.Errorf("listener %+v (file queued %d), want LISTEN on %#x with 1 queued event", l, files[listener.f].QueuedEvents, e.sid)
	}
	if a := files[active.f].IDs[active.id]; a.State != cmcore.StateREQSent || a.LocalCommID == 0 ||
		a.Port != 1 || a.LocalQPN != 0x100+id {
		t.Errorf("active id %+v, want REQ_SENT with a comm id on port 1, QPN %#x", a, 0x100+id)
	}
	if f := files[active.f]; f.Comm != fakedut.ProcessName {
		t.Errorf("file's process name %q, want %q", f.Comm, fakedut.ProcessName)
	}
	// The REQ's new connection is hidden until delivered: exactly two ids.
	if n := len(files[0].IDs) + len(files[1].IDs); n != 2 {
		t.Errorf("%d ids shown, want 2 (the undelivered child stays hidden)", n)
	}

	must(t, e.a.F.Close())
	if n := len(e.d.Device.Files()); n != 1 {
		t.Errorf("%d files after a close, want 1", n)
	}
}
