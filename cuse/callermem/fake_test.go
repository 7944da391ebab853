package callermem

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFake(t *testing.T) {
	f := NewFake()
	const pid = 42
	a := f.Alloc(pid, 10)
	if err := f.Write(pid, a, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	got, err := f.Bytes(pid, a+2, 3)
	if err != nil || string(got) != "234" {
		t.Fatalf("Bytes = %q, %v", got, err)
	}
	// The guard page after an allocation is unmapped.
	wantEFAULT(t, f.Read(pid, a+PageSize-2, make([]byte, 4)), unix.EFAULT)
	// A second allocation does not overlap the first.
	if b := f.Alloc(pid, 1); b < a+PageSize {
		t.Fatalf("Alloc returned %#x inside %#x's range", b, a)
	}

	// Spanning two mapped pages works; unmapping the second faults with
	// the first page's bytes already written, like the kernel.
	f.Map(pid, 0x100000, 2*PageSize)
	if err := f.Write(pid, 0x100000+PageSize-1, []byte("ab")); err != nil {
		t.Fatal(err)
	}
	f.Unmap(pid, 0x100000+PageSize, 1)
	err = f.Write(pid, 0x100000+PageSize-1, []byte("xy"))
	var e *Error
	if !errors.As(err, &e) || e.Done != 1 {
		t.Fatalf("err = %v, want *Error with Done 1", err)
	}
	wantEFAULT(t, err, nil)
	if b, _ := f.Bytes(pid, 0x100000+PageSize-1, 1); string(b) != "x" {
		t.Fatalf("byte before the hole = %q, want x", b)
	}

	// Unknown process and pid 0.
	wantEFAULT(t, f.Read(7, a, make([]byte, 1)), unix.ESRCH)
	wantEFAULT(t, f.Read(0, a, make([]byte, 1)), nil)
	// Processes are separate address spaces.
	f.Map(43, a, 1)
	if b, _ := f.Bytes(43, a, 1); b[0] != 0 {
		t.Fatal("pid 43 sees pid 42's memory")
	}
}
