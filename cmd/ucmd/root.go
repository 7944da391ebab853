package main

import (
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/ucmd/ucmd/conformance"
	"github.com/ucmd/ucmd/internal/daemon"
)

// version is set by the linker for release builds.
var version = "dev"

// defaultRuntimeDir holds the control socket and the infiniband_cm class tree.
const defaultRuntimeDir = "/run/ucmd"

type globalFlags struct {
	runtimeDir string
	env        environment
}

// environment is the machine the commands act on. The zero value is this
// one; tests run the commands in-process on a fake one (the fake CUSE
// kernel of internal/daemon/daemontest).
type environment struct {
	daemon  daemon.Env                                 // serve's; nil fields are the real machine
	devDir  string                                     // serve's daemon.Config.DevDir; "" is /dev
	dropCap func(bit uintptr) (held bool, err error)   // serve's; nil is dropCapability
	openDUT func(path string) (conformance.DUT, error) // conformance's; nil is conformance.OpenPath
}

func newRootCmd() *cobra.Command { return newRootCmdIn(environment{}) }

// newRootCmdIn is the CLI acting on env.
func newRootCmdIn(env environment) *cobra.Command {
	g := &globalFlags{env: env}
	root := &cobra.Command{
		Use:   "ucmd",
		Short: "userspace /dev/infiniband/ucmN (the deleted ib_ucm driver) over CUSE",
		Long: `ucmd registers /dev/infiniband/ucm0, ucm1, ... through CUSE and answers the
legacy ib_ucm write() ABI (version 5) on them, running the IB connection
manager itself over the kernel's umad interface. Without a command it serves
(ucmd serve); the other commands inspect and test a running ucmd.`,
		Example: `  sudo modprobe -r rdma_ucm rdma_cm ib_cm; sudo modprobe cuse ib_umad
  sudo ucmd                                  # serve every RDMA device with umad ports
  sudo ucmd --fabric sim                     # a simulated fabric, no HCA needed
  sudo ucmd exec -- ./my_libibcm_app         # run a libibcm program that finds its device
  ucmd status                                # what the running ucmd serves
  ucmd --version`,
		Version:       buildVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate(versionLine() + "\n")
	sf := &serveFlags{}
	sf.register(root.Flags())
	root.Args = cobra.ArbitraryArgs // RunE names an unknown command
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usage(fmt.Errorf("unknown command %q for ucmd", args[0]))
		}
		return runServe(cmd, g, sf)
	}
	root.PersistentFlags().StringVar(&g.runtimeDir, "runtime-dir", defaultRuntimeDir,
		"directory for the control socket and the infiniband_cm class tree")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if g.runtimeDir == "" {
			// Empty, the sockets would land in the working directory.
			return usage(fmt.Errorf(`--runtime-dir "": want a directory (default %s)`, defaultRuntimeDir))
		}
		if !filepath.IsAbs(g.runtimeDir) {
			// A relative one would be another directory for every
			// working directory: status, trace and exec would not find
			// the daemon's sockets and class tree.
			return usage(fmt.Errorf("--runtime-dir %q: want an absolute path (default %s)", g.runtimeDir, defaultRuntimeDir))
		}
		return nil
	}
	root.AddCommand(
		&cobra.Command{
			Use:     "version",
			Short:   "print the version",
			Example: "  ucmd version          # same as ucmd --version",
			Args:    cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			},
		},
		newServeCmd(g, sf),
		newExecCmd(g),
		newStatusCmd(g),
		newTraceCmd(g),
		newConformanceCmd(g),
	)
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = `  ucmd completion bash > /etc/bash_completion.d/ucmd
  ucmd completion zsh > "${fpath[1]}/_ucmd"
  ucmd completion fish > ~/.config/fish/completions/ucmd.fish`
		for _, sh := range c.Commands() {
			sh.Example = "  source <(ucmd completion " + sh.Name() + ")   # this shell only; see above for every session"
			if sh.Name() == "powershell" {
				sh.Example = "  ucmd completion powershell | Out-String | Invoke-Expression"
			} else if sh.Name() == "fish" {
				sh.Example = "  ucmd completion fish | source"
			}
		}
	}
	markUsageErrors(root)
	return root
}

// markUsageErrors gives the flag and argument errors of c and its
// subcommands the usage exit status.
func markUsageErrors(c *cobra.Command) {
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error { return usage(args(cmd, a)) }
	}
	for _, sub := range c.Commands() {
		markUsageErrors(sub)
	}
}

// extraCommands are added by files built with tags (the man page generator).
var extraCommands []func() *cobra.Command

// versionLine is what --version prints. It names the Go that built ucmd,
// whose advisories (net/http, crypto/tls) are ucmd's too.
func versionLine() string {
	return fmt.Sprintf("ucmd %s (ucm ABI 5, %s)", buildVersion(), runtime.Version())
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
