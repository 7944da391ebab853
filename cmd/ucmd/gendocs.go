//go:build gendocs

package main

// Built only with -tags gendocs (make man): the hidden `ucmd gendocs DIR`
// writes a man page per command, so the daemon itself does not carry the
// man page renderer.

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func init() {
	extraCommands = append(extraCommands, func() *cobra.Command {
		return &cobra.Command{
			Use:     "gendocs DIR",
			Short:   "write man pages (section 8) for every command into DIR",
			Example: "  go run -tags gendocs ./cmd/ucmd gendocs bin/man",
			Hidden:  true,
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				root := cmd.Root()
				root.DisableAutoGenTag = true
				hdr := &doc.GenManHeader{Title: "UCMD", Section: "8", Source: "ucmd " + buildVersion(), Manual: "System Administration"}
				if err := doc.GenManTree(root, hdr, args[0]); err != nil {
					return fmt.Errorf("gendocs: %w", err)
				}
				return nil
			},
		}
	})
}
