package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/ucmd/ucmd/internal/status"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [dev NAME] [pid N] [state STATE] [uid N]",
		Short: "show devices, open files, ids and MAD counters of the running daemon",
		Long: `Show what the running ucmd serves, read from its control socket
(<runtime-dir>/ucmd.sock; root only, or also the group of serve's
--status-group): per device its ports, MAD counters and failed commands by
errno; the memory charged against serve's --memory-budget, the refusals
by limit, and per user (uid) what it holds over every node; per open file
the opener's process (pid and name) and uid, its queued events and waiting
commands; and, like
rdma resource show cm_id, one line per id: device, port, id, pid, process
name, state, service id, local and remote QPN and comm id, remote GID.

Filters, as with rdma: dev NAME (the RDMA device or the node, ucm0),
pid N (the opener's process), state STATE (ESTABLISHED, LISTEN, ...),
uid N (the opener's user: its files, and its line of the users). In
--json, 64-bit values (service ids) are hex strings. The memory budget
and the refusals are the whole daemon's, whatever the filter.`,
		Example: `  sudo ucmd status
  sudo ucmd status dev ucm0 state established
  sudo ucmd status uid 1000
  sudo ucmd status pid 4242 --json | jq '.devices[].files[].ids[].service_id'`,
		Args: func(_ *cobra.Command, args []string) error {
			_, err := status.ParseFilter(args)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			filter, err := status.ParseFilter(args)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			snap, err := status.Fetch(ctx, g.runtimeDir)
			if err != nil {
				return err
			}
			if err := filter.CheckDevice(snap); err != nil {
				return usage(err)
			}
			snap = filter.Apply(snap)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(snap)
			}
			return status.WriteText(cmd.OutOrStdout(), snap)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}
