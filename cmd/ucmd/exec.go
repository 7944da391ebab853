package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ucmd/ucmd/internal/sysclass"
)

func newExecCmd(g *globalFlags) *cobra.Command {
	var userName string
	var ignorePipe bool
	cmd := &cobra.Command{
		Use:   "exec [--user NAME] -- PROGRAM [ARG...]",
		Short: "run a libibcm program that can find ucmd's devices",
		Long: `Run PROGRAM in a private mount namespace in which /sys/class/infiniband_cm
exists, as it did before Linux removed ib_ucm: abi_version reads 5 and
ucmN/ibdev names the RDMA device that /dev/infiniband/ucmN serves. libibcm
finds its device through exactly these files. The rest of /sys/class is the
host's, and nothing changes outside the program's namespace.

Making the namespace needs root (CAP_SYS_ADMIN): run ucmd exec with sudo.
PROGRAM then runs as --user NAME, without privileges (uid, gid and groups of
NAME; HOME, USER and LOGNAME set to NAME's). The default is the user who ran
sudo (SUDO_USER); without sudo, or with --user root, PROGRAM runs as root.
Users are found in /etc/passwd, else through getent(1) (LDAP, sssd), else,
for the sudo user, as sudo names them (SUDO_UID, SUDO_GID).

The rest of PROGRAM's environment is what ucmd exec got, which under sudo
is sudo's reset one: PATH is secure_path, and LD_LIBRARY_PATH and the paths
of loaded environment modules are gone. Pass what PROGRAM needs through
env(1), as in the last example, or keep it with sudo's --preserve-env=LIST
where sudoers allows.

The exit status is PROGRAM's; as env(1)'s, 127 when PROGRAM was not found,
126 when it cannot be run, 125 when ucmd exec itself failed.

PROGRAM starts with every signal but SIGHUP and SIGINT at its default action,
even where ucmd exec was started with it ignored: the Go runtime replaces an
inherited SIG_IGN, and ucmd cannot tell it was there. A systemd service's
processes start with SIGPIPE ignored (IgnoreSIGPIPE=yes); --ignore-sigpipe
starts PROGRAM so.`,
		Example: `  sudo ucmd exec -- cmpost 10.0.0.2     # runs as you (SUDO_USER)
  sudo ucmd exec --user mpi -- ./my_libibcm_app --port 1
  ucmd exec --runtime-dir /run/ucmd-test -- cat /sys/class/infiniband_cm/ucm0/ibdev   # as root
  sudo ucmd exec -- env PATH="$PATH" LD_LIBRARY_PATH="$LD_LIBRARY_PATH" mpi_app   # your paths`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Exit statuses as env(1)'s: 127 PROGRAM not found, 126 not
			// runnable, 125 anything else that stopped ucmd exec.
			return withStatus(exitExecFailed, runExec(cmd, g, userName, ignorePipe, args))
		},
	}
	cmd.Flags().StringVar(&userName, "user", "", "run PROGRAM as this user (name or uid; default: $SUDO_USER, else stay root)")
	cmd.Flags().BoolVar(&ignorePipe, "ignore-sigpipe", false, "start PROGRAM with SIGPIPE ignored (as systemd starts a service's processes)")
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// runExec is exec's work; on success it does not return.
func runExec(cmd *cobra.Command, g *globalFlags, userName string, ignorePipe bool, args []string) error {
	if !execPrivileged() {
		return errors.New("exec needs root: it makes a private mount namespace (CAP_SYS_ADMIN); run `sudo ucmd exec -- PROGRAM`, and PROGRAM runs as you (--user)")
	}
	name := execUser(userName, cmd.Flags().Changed("user"), os.Getenv)
	var target *execCred
	if name != "" {
		var err error
		if target, err = lookupExecCred(name, os.Getenv); err != nil {
			return err
		}
		if err := searchableByAll(g.runtimeDir); err != nil {
			return fmt.Errorf("--user %s: %w", name, err)
		}
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return withStatus(programStatus(err), err)
	}
	if err := sysclass.Enter(g.runtimeDir); err != nil {
		return err
	}
	env := os.Environ()
	if target != nil {
		if err := target.become(); err != nil {
			return err
		}
		env = target.environ(env)
	}
	if ignorePipe {
		signal.Ignore(syscall.SIGPIPE) // SIG_IGN survives execve
	}
	// Exec from the goroutine (and so the thread) that entered the
	// namespace: the new program inherits it.
	err = syscall.Exec(path, args, env)
	return withStatus(programStatus(err), fmt.Errorf("exec %s: %w", path, err))
}

// execPrivileged says whether exec can make a mount namespace (tests replace it).
var execPrivileged = func() bool { return os.Geteuid() == 0 || hasCapSysAdmin() }

func hasCapSysAdmin() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	return capEffHas(string(b), 21) // CAP_SYS_ADMIN
}

// execUser picks who PROGRAM runs as: --user if given, else the sudo user;
// "" means root, unchanged.
func execUser(flag string, changed bool, getenv func(string) string) string {
	name := flag
	if !changed {
		name = getenv("SUDO_USER")
	}
	if name == "root" || name == "0" {
		return ""
	}
	return name
}

type execCred struct {
	u      *user.User
	uid    int
	gid    int
	groups []int
}

// lookupExecCred finds who NAME (or a uid) is. ucmd is built without cgo,
// so os/user reads /etc/passwd and /etc/group only; the accounts of a
// cluster mostly come from LDAP or sssd, which glibc's getent(1) asks
// through NSS. Last, the sudo user of a sudo without getent: sudo says
// its uid and gid.
func lookupExecCred(name string, getenv func(string) string) (*execCred, error) {
	u, err := user.Lookup(name)
	if err != nil {
		u, err = user.LookupId(name)
	}
	var groups []string
	if err != nil {
		var nerr error
		if u, groups, nerr = getentUser(name); nerr != nil {
			u = sudoUser(name, getenv)
		}
		if u == nil {
			return nil, fmt.Errorf("--user %s: not in /etc/passwd, and getent: %v", name, nerr)
		}
	} else if ids, err := u.GroupIds(); err == nil {
		groups = ids
	}
	c := &execCred{u: u}
	if c.uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, fmt.Errorf("--user %s: uid %q: %w", name, u.Uid, err)
	}
	if c.gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, fmt.Errorf("--user %s: gid %q: %w", name, u.Gid, err)
	}
	c.groups = []int{c.gid}
	for _, s := range groups {
		if g, err := strconv.Atoi(s); err == nil && g != c.gid {
			c.groups = append(c.groups, g)
		}
	}
	return c, nil
}

// getent is the program asked for NSS accounts (tests replace it).
var getent = func(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "getent", args...).Output()
}

// getentUser is NAME's passwd entry and group ids through NSS.
func getentUser(name string) (*user.User, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := getent(ctx, "passwd", name)
	if err != nil {
		return nil, nil, fmt.Errorf("passwd %s: %w", name, err)
	}
	// name:password:uid:gid:gecos:home:shell
	f := strings.Split(strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]), ":")
	if len(f) < 7 {
		return nil, nil, fmt.Errorf("passwd %s: %q is not a passwd entry", name, out)
	}
	u := &user.User{Username: f[0], Uid: f[2], Gid: f[3], Name: f[4], HomeDir: f[5]}
	// "NAME gid gid ...": the groups initgroups(3) would give, LDAP's too.
	var groups []string
	if out, err := getent(ctx, "initgroups", u.Username); err == nil {
		if g := strings.Fields(string(out)); len(g) > 1 {
			groups = g[1:]
		}
	}
	return u, groups, nil
}

// sudoUser is the user who ran sudo, from what sudo tells (SUDO_USER,
// SUDO_UID, SUDO_GID), when name is that user or uid; nil otherwise.
func sudoUser(name string, getenv func(string) string) *user.User {
	uid, gid, who := getenv("SUDO_UID"), getenv("SUDO_GID"), getenv("SUDO_USER")
	if uid == "" || gid == "" || (name != who && name != uid) {
		return nil
	}
	if who == "" {
		who = uid
	}
	return &user.User{Username: who, Uid: uid, Gid: gid, HomeDir: "/"}
}

// become drops to the user's credentials on every thread (the Go runtime's
// setuid family is process-wide); the capabilities go with uid 0.
func (c *execCred) become() error {
	if err := syscall.Setgroups(c.groups); err != nil {
		return fmt.Errorf("--user %s: setgroups: %w", c.u.Username, err)
	}
	if err := syscall.Setgid(c.gid); err != nil {
		return fmt.Errorf("--user %s: setgid: %w", c.u.Username, err)
	}
	if err := syscall.Setuid(c.uid); err != nil {
		return fmt.Errorf("--user %s: setuid: %w", c.u.Username, err)
	}
	return nil
}

func (c *execCred) environ(env []string) []string {
	set := map[string]string{"HOME": c.u.HomeDir, "USER": c.u.Username, "LOGNAME": c.u.Username}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range []string{"HOME", "USER", "LOGNAME"} {
		out = append(out, k+"="+set[k])
	}
	return out
}

// capEffHas reads bit from the CapEff line of a /proc/PID/status text.
func capEffHas(status string, bit uint) bool {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}

// searchableByAll checks that another user can reach dir: the namespace's
// /sys/class entries are symlinks into dir/exec-root.
func searchableByAll(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := abs; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the program could not follow /sys/class into %s: %s (mode %04o) is not searchable by other users; use a runtime directory such as /run/ucmd (0755)", abs, d, st.Mode().Perm())
		}
		if d == "/" {
			return nil
		}
	}
}
