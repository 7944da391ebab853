package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set by the linker for release builds.
var version = "dev"

// defaultRuntimeDir holds the control socket and the infiniband_cm class tree.
const defaultRuntimeDir = "/run/ucmd"

type globalFlags struct {
	runtimeDir string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "ucmd",
		Short:         "userspace /dev/infiniband/ucmN (the deleted ib_ucm driver) over CUSE",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	sf := &serveFlags{}
	sf.register(root.Flags())
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown command %q for ucmd", args[0])
		}
		return runServe(cmd, g, sf)
	}
	root.PersistentFlags().StringVar(&g.runtimeDir, "runtime-dir", defaultRuntimeDir,
		"directory for the control socket and the infiniband_cm class tree")
	root.AddCommand(
		&cobra.Command{
			Use:   "version",
			Short: "print the version",
			Args:  cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				fmt.Fprintf(cmd.OutOrStdout(), "ucmd %s (ucm ABI 5)\n", buildVersion())
			},
		},
		newServeCmd(g, sf),
		newExecCmd(g),
		newStatusCmd(g),
		newConformanceCmd(g),
	)
	return root
}

func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}
