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
		Use:   "status",
		Short: "show devices, open files, ids and MAD counters of the running daemon",
		Long: `Show what the running ucmd serves, read from its control socket
(<runtime-dir>/ucmd.sock, root only): per device its ports and MAD counters,
per open file the opener's pid and each id's state, service id and comm ids.`,
		Example: `  sudo ucmd status
  sudo ucmd status --json | jq '.devices[].counters'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			snap, err := status.Fetch(ctx, g.runtimeDir)
			if err != nil {
				return err
			}
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
