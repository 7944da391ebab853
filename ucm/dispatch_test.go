package ucm

import (
	"context"
	"errors"
	"testing"

	"github.com/ucmd/ucmd/abi"
)

// TestHandlerTable: every command number has a handler, and it takes the
// struct abi's command table decodes that number into (a mismatch would
// answer every such write with EINVAL).
func TestHandlerTable(t *testing.T) {
	errProbe := errors.New("probe")
	for c := abi.Cmd(0); c < abi.NumCmds; c++ {
		h := handlers[c]
		if h == nil {
			t.Errorf("%v: no handler", c)
			continue
		}
		// A nil *call makes the handler panic on its first use of the
		// call; reaching it at all means the type assertion passed.
		err := func() (err error) {
			defer func() {
				if recover() != nil {
					err = errProbe
				}
			}()
			return h(nil, context.Background(), abi.NewCommand(c))
		}()
		if !errors.Is(err, errProbe) {
			t.Errorf("%v: handler for %T did not run: %v", c, abi.NewCommand(c), err)
		}
	}
}
