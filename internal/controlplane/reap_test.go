package controlplane

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReapOrphans leaves a process behind the way a killed test binary's
// control plane would be left (its parent gone, a control-plane directory in
// its arguments) and checks that the next start kills it and removes its
// directory, while a process whose parent lives is left alone.
func TestReapOrphans(t *testing.T) {
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	arg := "--data-dir=" + filepath.Join(dir, "etcd")
	// The outer shell starts the orphan in the background and exits: the
	// orphan's parent becomes init.
	out, err := exec.Command("bash", "-c", `bash -c 'while :; do sleep 0.1; done' `+arg+` >/dev/null 2>&1 & echo $!`).Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = exec.Command("kill", "-9", strconv.Itoa(orphan)).Run() }()
	alive := exec.Command("bash", "-c", "while :; do sleep 0.1; done", "--data-dir="+filepath.Join(dir, "etcd2"))
	if err := alive.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = alive.Process.Kill(); _ = alive.Wait() }()
	waitParent := time.Now().Add(10 * time.Second)
	// Wait for the orphan to have exec'd (until then its command line is
	// the outer shell's, which ReapOrphans rightly ignores: under load the
	// outer shell can exit first) and for its parent to be init.
	for ppid(orphan) != "1" || !hasArg(orphan, arg) {
		if time.Now().After(waitParent) {
			if hasArg(orphan, arg) {
				t.Skipf("the orphan's parent is %s, not init: this machine has a subreaper, and ReapOrphans cannot tell orphans", ppid(orphan))
			}
			t.Fatalf("the orphan (pid %d) did not exec its command within 10 s", orphan)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ReapOrphans(nil)
	deadline := time.Now().Add(10 * time.Second)
	for ppid(orphan) != "" {
		if time.Now().After(deadline) {
			t.Fatal("the orphan still runs")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the orphan's directory is still there: %v", err)
	}
	if ppid(alive.Process.Pid) == "" {
		t.Error("a process whose parent lives was killed")
	}
}

// hasArg reports whether pid's command line has arg as one argument.
func hasArg(pid int, arg string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	for _, a := range strings.Split(string(cmdline), "\x00") {
		if a == arg {
			return true
		}
	}
	return false
}

// ppid returns pid's parent, or "" when pid does not run (zombies count as
// gone).
func ppid(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 || fields[0] == "Z" {
		return ""
	}
	return fields[1]
}
