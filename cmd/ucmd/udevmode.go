package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// udevRuleDirs are where udev reads rules, first the ones whose file of a
// name overrides the same name further down (udev(7)).
var udevRuleDirs = []string{"/etc/udev/rules.d", "/run/udev/rules.d", "/usr/local/lib/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d"}

// udevRuleName is the packaged rule (dist/90-ucmd.rules).
const udevRuleName = "90-ucmd.rules"

var udevMode = regexp.MustCompile(`MODE="?(0?[0-7]{3})"?`)

// udevModeConflict says why --mode will not hold: udev applies the MODE of
// the installed rule to the nodes at every event (their add, and any
// `udevadm trigger`), after ucmd set its own. "" when it holds or no rule
// says otherwise.
func udevModeConflict(mode os.FileMode) string {
	for _, dir := range udevRuleDirs {
		path := filepath.Join(dir, udevRuleName)
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the next directory's, if any, is the rule
		}
		m := udevMode.FindSubmatch(b)
		if m == nil {
			return ""
		}
		ruled, err := strconv.ParseUint(string(m[1]), 8, 32)
		if err != nil || os.FileMode(ruled) == mode.Perm() {
			return ""
		}
		return fmt.Sprintf("--mode %04o: udev's rule %s sets MODE %s on these nodes at every udev event; for %04o, put a copy of it with MODE=\"%04o\" in /etc/udev/rules.d/%s (and GROUP=, if a group is to open them)",
			mode.Perm(), path, m[1], mode.Perm(), mode.Perm(), udevRuleName)
	}
	return ""
}
