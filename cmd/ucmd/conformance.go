package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/daemon"
	"github.com/ucmd/ucmd/internal/status"
)

func newConformanceCmd(g *globalFlags) *cobra.Command {
	var ibdev, run string
	var timeout time.Duration
	var strict bool
	cmd := &cobra.Command{
		Use:   "conformance PATH",
		Short: "check a ucm device node against the kernel's ib_ucm ABI",
		Long: `Run the ucm ABI conformance suite against the device node PATH (for example
/dev/infiniband/ucm0): every command's success and errno paths, the event
queue rules and the connection flows, as the kernel's ib_ucm behaved. It works
against ucmd or an old kernel's ib_ucm. Cases that connect need a path from
the device's port to itself: the RDMA device is taken from --ibdev, else from
the running ucmd, else from /sys/class/infiniband_cm.

Prints one line per case and a summary; exits 0 only if no case failed.`,
		Example: `  ucmd conformance /dev/infiniband/ucm0
  ucmd conformance --run '^write/' /dev/infiniband/ucm0
  ucmd conformance --ibdev mlx5_0 --timeout 2m /dev/infiniband/ucm1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var filter *regexp.Regexp
			if run != "" {
				var err error
				if filter, err = regexp.Compile(run); err != nil {
					return fmt.Errorf("--run: %w", err)
				}
			}
			path := args[0]
			open := g.env.openDUT
			if open == nil {
				open = conformance.OpenPath
			}
			dut, err := open(path)
			if err != nil {
				return err
			}
			defer dut.Close()
			out := cmd.OutOrStdout()
			if ibdev == "" {
				ibdev = ibdevOf(cmd.Context(), g.runtimeDir, path)
			}
			if ibdev != "" {
				if lp, err := loopback(ibdev); err != nil {
					fmt.Fprintf(out, "note: no loopback path on %s (%v): connecting cases skip\n", ibdev, err)
				} else if node, ok := dut.(*conformance.Node); ok {
					node.Loopback = &lp
				}
			} else {
				fmt.Fprintf(out, "note: RDMA device of %s unknown (use --ibdev): connecting cases skip\n", path)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var pass, fail, skip int
			for _, c := range conformance.Cases() {
				if filter != nil && !filter.MatchString(c.Name) {
					continue
				}
				err := runCaseBounded(ctx, dut, c)
				switch {
				case err == nil:
					pass++
					fmt.Fprintf(out, "PASS %s\n", c.Name)
				case errors.Is(err, conformance.ErrSkip):
					skip++
					fmt.Fprintf(out, "SKIP %s: %v\n", c.Name, err)
				default:
					fail++
					fmt.Fprintf(out, "FAIL %s: %v\n     kernel: %s\n", c.Name, err, c.Spec)
				}
				if ctx.Err() != nil {
					break
				}
			}
			fmt.Fprintf(out, "conformance %s: %d passed, %d failed, %d skipped\n", path, pass, fail, skip)
			if fail > 0 {
				return fmt.Errorf("%d conformance case(s) failed", fail)
			}
			if strict && skip > 0 {
				return fmt.Errorf("%d conformance case(s) skipped (--strict)", skip)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("conformance: %w", ctx.Err())
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&ibdev, "ibdev", "", "RDMA device the node serves (for the connecting cases)")
	cmd.Flags().StringVar(&run, "run", "", "only cases whose name matches this regular expression")
	cmd.Flags().BoolVar(&strict, "strict", false, "fail when any case is skipped (no --ibdev, no loopback path, no root for the credential case): a run that passes then ran every case")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}

// ibdevOf finds the RDMA device behind a ucm node: the running ucmd knows,
// and so does an infiniband_cm class tree (old kernels, or `ucmd exec`).
func ibdevOf(ctx context.Context, runtimeDir, node string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if snap, err := status.Fetch(ctx, runtimeDir); err == nil {
		for _, d := range snap.Devices {
			if d.Node == node {
				return d.Name
			}
		}
	}
	b, err := os.ReadFile(filepath.Join("/sys/class/infiniband_cm", filepath.Base(node), "ibdev"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// loopback builds a path record from port 1 of ibdev to itself.
func loopback(ibdev string) (abi.PathRec, error) {
	p, err := daemon.FirstPort(ibdev)
	if err != nil {
		return abi.PathRec{}, err
	}
	return conformance.LoopbackPath(p.GID, p.LID), nil
}

// runCaseBounded is conformance.RunCase, given up when ctx ends: a device
// that never answers a write(2) (a GET_EVENT that blocks where the kernel
// answered ENOSPC, say) holds a case in a system call no context reaches,
// and --timeout is to end the run all the same. The case's goroutine and
// its files are left behind; the command exits soon after.
func runCaseBounded(ctx context.Context, dut conformance.DUT, c conformance.Case) error {
	done := make(chan error, 1)
	go func() { done <- conformance.RunCase(ctx, dut, c) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer from the device before --timeout ran out (%w): it hangs in this case", ctx.Err())
	}
}
