package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ucmd/ucmd/internal/sysclass"
)

func newExecCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "exec -- PROGRAM [ARG...]",
		Short: "run a libibcm program that can find ucmd's devices",
		Long: `Run PROGRAM in a private mount namespace in which /sys/class/infiniband_cm
exists, as it did before Linux removed ib_ucm: abi_version reads 5 and
ucmN/ibdev names the RDMA device that /dev/infiniband/ucmN serves. libibcm
finds its device through exactly these files. The rest of /sys/class is the
host's, and nothing changes outside the program's namespace.

Needs CAP_SYS_ADMIN (run as root). The program keeps ucmd's credentials.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := exec.LookPath(args[0])
			if err != nil {
				return err
			}
			if err := sysclass.Enter(g.runtimeDir); err != nil {
				return err
			}
			// Exec from the goroutine (and so the thread) that entered the
			// namespace: the new program inherits it.
			err = syscall.Exec(path, args, os.Environ())
			return fmt.Errorf("exec %s: %w", path, err)
		},
	}
	cmd.Flags().SetInterspersed(false)
	return cmd
}
