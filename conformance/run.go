package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ucmd/ucmd/abi"
	"golang.org/x/sys/unix"
)

// ErrSkip is reported for a case the DUT cannot run (no loopback path).
var ErrSkip = errors.New("skipped")

// Case is one conformance check.
type Case struct {
	// Name is "area/what", e.g. "create_id/efault-response".
	Name string
	// Spec says what the kernel did, citing the section it comes from by
	// document ("ucm-abi.md §3.2", "docs/ib-cm.md §7", "design.md rule 6":
	// files in docs/), since `ucmd conformance` prints it to users.
	Spec string
	run  func(e *env) error
}

// env is what a case runs with: the DUT and the files it opened, which
// are closed when the case ends.
type env struct {
	Ctx   context.Context
	DUT   DUT
	files []*Client
}

// Wait bounds how long a case waits for an event.
const Wait = 5 * time.Second

// Client opens a file for the case.
func (e *env) Client() (*Client, error) { return e.open(false) }

// NonblockClient opens a file with O_NONBLOCK.
func (e *env) NonblockClient() (*Client, error) { return e.open(true) }

func (e *env) open(nonblock bool) (*Client, error) {
	c, err := NewClient(e.DUT, nonblock)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	e.files = append(e.files, c)
	return c, nil
}

// Path returns the loopback path, or ErrSkip.
func (e *env) Path() (abi.PathRec, error) {
	p, ok := e.DUT.LoopbackPath()
	if !ok {
		return p, fmt.Errorf("no loopback path: %w", ErrSkip)
	}
	return p, nil
}

var sidSeq atomic.Uint64

// SID returns a service id no other case uses, outside the ranges ucm
// refuses.
func SID() uint64 { return 0xDEAD0000 + sidSeq.Add(1) }

func (e *env) close() {
	for i := len(e.files) - 1; i >= 0; i-- {
		e.files[i].Close()
	}
	e.files = nil
}

// Cases returns every case, in the order Run runs them.
func Cases() []Case {
	var cs []Case
	cs = append(cs, writeCases()...)
	cs = append(cs, idCases()...)
	cs = append(cs, lookupCases()...)
	cs = append(cs, efaultCases()...)
	cs = append(cs, cmCases()...)
	cs = append(cs, eventCases()...)
	cs = append(cs, flowCases()...)
	cs = append(cs, moreCases()...)
	return cs
}

// Run runs every case against dut, one at a time, and reports each: err
// nil for a pass, wrapping ErrSkip for a skip. It returns the number of
// failures; it stops early if ctx is done.
func Run(ctx context.Context, dut DUT, report func(Case, error)) int {
	failed := 0
	for _, c := range Cases() {
		if ctx.Err() != nil {
			break
		}
		err := RunCase(ctx, dut, c)
		if err != nil && !errors.Is(err, ErrSkip) {
			failed++
		}
		report(c, err)
	}
	return failed
}

// RunCase runs one case. A case that panics (a device that answered
// with something a case's code did not expect, a data pointer without its
// present bit, say) fails with the panic, and the run goes on.
func RunCase(ctx context.Context, dut DUT, c Case) (err error) {
	e := &env{Ctx: ctx, DUT: dut}
	defer e.close()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the case's code panicked on what the device answered: %v", p)
		}
	}()
	return c.run(e)
}

// expect checks that err carries errno (0: success).
func expect(err error, errno unix.Errno) error {
	got := Errno(err)
	if got == errno {
		return nil
	}
	if errno == 0 {
		return fmt.Errorf("failed: %w", err)
	}
	if err == nil {
		return fmt.Errorf("succeeded, want %v (%d)", errno, int(errno))
	}
	return fmt.Errorf("got %v (%d), want %v (%d)", got, int(got), errno, int(errno))
}

// check prefixes a failure with the step that failed.
func check(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
