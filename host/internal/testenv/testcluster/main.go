// Command testcluster runs a command beside one control plane that the
// test packages it runs share: make test runs
//
//	testcluster -- gotestsum ... -- ./...
//
// It starts a control plane as testenv.Start does (the tests' CRDs and
// kube-controller-manager's controllers), runs the command with
// WASMRECONCILE_TEST_CONTROLPLANE (testenv.SharedControlPlaneEnv) naming
// it, then stops it and exits with the command's status. Every package
// whose TestMain calls testenv.Main without OwnControlPlane works on it,
// each test in a namespace of its own; one control plane instead of one
// per package saves each package the start (seconds of CPU under load)
// and the run the processes' memory and idle CPU.
//
// SIGINT and SIGTERM are passed on to the command, and the control plane
// is stopped once it has exited. If testcluster itself is killed, the
// control plane's processes die with it (internal/controlplane).
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: testcluster -- command [args...]: runs command beside a control plane its test packages share")
		os.Exit(2)
	}
	os.Exit(run(args))
}

func run(args []string) int {
	start := time.Now()
	cp, err := testenv.Start(testenv.CRDs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testcluster:", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testcluster: stopping the control plane:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "testcluster: a control plane for the test packages started in %s (%s); packages that kill its components start their own\n",
		time.Since(start).Round(100*time.Millisecond), cp.Dir())

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), testenv.SharedControlPlaneEnv+"="+cp.Dir())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testcluster:", err)
		return 1
	}
	go func() {
		for s := range signals {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(signals)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, "testcluster:", args[0]+":", err)
		return 1
	}
}
