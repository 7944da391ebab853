package ucm

import (
	"context"
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
)

// What a command allocates in ucm, on the real caller-memory path
// (process_vm_writev into this process): a command that creates nothing
// allocates nothing (its call, decoded command and encoded response are
// pooled), GET_EVENT of a queued event nothing either (its response and
// the segments of its one process_vm_writev are the call's), and
// CREATE_ID+DESTROY_ID only the id itself, ucm's context and the CM's ID.
func TestCommandAllocs(t *testing.T) {
	d, cm, h, write, addr, resp := directFile(t)
	create := conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: addr})
	write(create)
	id := binary.NativeEndian.Uint32(resp)
	attr := conformance.Encode(abi.CmdAttrID, abi.AttrIDRespSize, &abi.AttrID{ID: id, Response: addr})
	destroy := conformance.Encode(abi.CmdDestroyID, abi.DestroyIDRespSize, &abi.DestroyID{Response: addr})
	write(attr)
	if n := testing.AllocsPerRun(100, func() { write(attr) }); n != 0 {
		t.Errorf("ATTR_ID: %v allocations, want 0", n)
	}
	pair := func() {
		write(create)
		binary.NativeEndian.PutUint32(destroy[abi.HeaderSize+8:], binary.NativeEndian.Uint32(resp))
		write(destroy)
	}
	pair()
	if n := testing.AllocsPerRun(100, pair); n > 2 {
		t.Errorf("CREATE_ID+DESTROY_ID: %v allocations, want 2 (the id)", n)
	}

	f := h.(*file)
	x := &ucmCtx{file: f, cmID: cm.CreateID(d.handler)}
	if err := f.addCtx(x); err != nil {
		t.Fatal(err)
	}
	d.ids.publish(x)
	data := make([]byte, 16)
	e := &event{resp: abi.EventResp{Event: abi.CMREPReceived}, data: []byte("private data 16B")}
	get := conformance.Encode(abi.CmdEvent, abi.EventRespSize, &abi.EventGet{
		Response: addr, Data: uint64(uintptr(unsafe.Pointer(&data[0]))), DataLen: uint8(len(data)),
	})
	deliver := func() {
		if err := f.enqueue(x, e); err != nil {
			t.Fatal(err)
		}
		write(get)
	}
	deliver()
	if string(data) != "private data 16B" {
		t.Fatalf("GET_EVENT copied %q", data)
	}
	if n := testing.AllocsPerRun(100, deliver); n != 0 {
		t.Errorf("GET_EVENT of a queued event: %v allocations, want 0", n)
	}
}

// BenchmarkHandleCreateDestroy is CREATE_ID then DESTROY_ID handed to a
// file's Write as the CUSE server hands them, with the responses written
// by process_vm_writev into this process: ucm's and cmcore's share of a
// command without any CUSE round trip or fake kernel (docs/perf.md, "The
// request path", counts its instructions).
func BenchmarkHandleCreateDestroy(b *testing.B) {
	_, _, _, write, addr, resp := directFile(b)
	create := conformance.Encode(abi.CmdCreateID, abi.CreateIDRespSize, &abi.CreateID{UID: 1, Response: addr})
	destroy := conformance.Encode(abi.CmdDestroyID, abi.DestroyIDRespSize, &abi.DestroyID{Response: addr})
	b.ReportAllocs()
	for b.Loop() {
		write(create)
		binary.NativeEndian.PutUint32(destroy[abi.HeaderSize+8:], binary.NativeEndian.Uint32(resp))
		write(destroy)
	}
}

// openDirect is a device made with cfg on a CM of its own on the simulated
// fabric, its caller memory this process (process_vm_readv/writev) unless
// cfg says otherwise, and a file of it opened by this process, released
// when tb ends; req is the request the file's calls are made with.
func openDirect(tb testing.TB, cfg Config) (*Device, cuse.Handle, cuse.Request) {
	tb.Helper()
	if cfg.CM == nil {
		cfg.CM = newSimCM(tb, "sim0")
	}
	if cfg.Memory == nil {
		cfg.Memory = callermem.ProcessVM{}
	}
	if cfg.ThreadGroup == nil {
		cfg.ThreadGroup = func(tid int) (int, error) { return os.Getpid(), nil }
	}
	if cfg.ProcessName == nil {
		cfg.ProcessName = func(int) (string, error) { return "t", nil }
	}
	d, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	req := cuse.Request{Caller: cuse.Caller{Pid: os.Getpid(), Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}, Flags: unix.O_RDWR}
	h, err := d.Open(context.Background(), req, nopWaker{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Release(context.Background()) })
	return d, h, req
}

// directFile is a device on the simulated fabric whose caller memory is
// this process (process_vm_writev), and a file of it opened by this
// process: write hands the file one command, failing tb on an error;
// responses go to resp, at addr.
func directFile(tb testing.TB) (d *Device, cm *cmcore.CM, h cuse.Handle, write func([]byte), addr uint64, resp []byte) {
	tb.Helper()
	d, h, req := openDirect(tb, Config{})
	cm = d.cm
	resp = make([]byte, abi.EventRespSize)
	addr = uint64(uintptr(unsafe.Pointer(&resp[0])))
	write = func(b []byte) {
		if n, err := h.Write(context.Background(), req, b); err != nil || n != len(b) {
			tb.Fatalf("%v: %d, %v", abi.Cmd(binary.NativeEndian.Uint32(b)), n, err)
		}
	}
	return d, cm, h, write, addr, resp
}
