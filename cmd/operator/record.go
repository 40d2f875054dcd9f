//go:build !runonly

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/compare"
	"github.com/wasmreconcile/wasmreconcile/internal/recording"
)

const recordUsage = `Usage: operator record --endpoint URL --module NAME [--token-file FILE] [--out DIR]

Fetches a running operator's flight recorder for one module (its last failed
calls and a sample of its successful ones) and writes each call as an
operator test case file, in a directory per version of the module
(OUT/sha256-<first 16 hex digits of its digest>): the input the guest saw (the objects it read
through cache_read included, Secrets' data REDACTED unless the operator runs
with --flight-recorder-keep-secrets), an expect block that is what
production returned (with the exact fuel the input uses on a fresh
instance), and a recorded block for operator replay.

The recorder is served on the operator's metrics server at ` + operator.FlightRecorderPath + `
to clients the API server authenticates and authorizes for GET on that
non-resource URL; reach it with kubectl port-forward:

  kubectl -n wasmreconcile-system port-forward deploy/wasmreconcile-operator 8080 &
  operator record --endpoint http://127.0.0.1:8080 --module widget \
      --token-file <(kubectl create token recorder -n wasmreconcile-system)

Then: operator test widget.wasm recorded/widget/sha256-…, or operator replay.

Flags:
`

func runRecord(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, recordUsage); fs.PrintDefaults() }
	endpoint := fs.String("endpoint", "", "base URL of the operator's metrics server, such as http://127.0.0.1:8080 (required)")
	module := fs.String("module", "", "the module whose calls to fetch (required)")
	token := fs.String("token", "", "bearer token (default: $WASMRECONCILE_TOKEN, else --token-file, else the kubeconfig's token)")
	tokenFile := fs.String("token-file", "", "file holding the bearer token")
	out := fs.String("out", "", "directory to write the case files to (default: recorded/MODULE)")
	failuresOnly := fs.Bool("failures-only", false, "write only the failed calls")
	timeout := fs.Duration("timeout", 30*time.Second, "timeout of the request")
	if _, err := parseInterleaved(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *endpoint == "" || *module == "" {
		return errors.New("operator record: --endpoint and --module are required; see operator record --help")
	}
	tok, err := bearerToken(*token, *tokenFile)
	if err != nil {
		return err
	}
	if tok == "" {
		return errors.New("operator record: no token to send: the recorder serves only clients the API server authenticates; export KUBECONFIG of a kubeconfig whose user has a token (operator dev prints one), or pass --token-file (kubectl create token ACCOUNT)")
	}
	cases, err := recording.Fetch(context.Background(), recording.FetchOptions{Endpoint: *endpoint, Path: operator.FlightRecorderPath,
		Module: *module, Token: tok, Timeout: *timeout})
	if err != nil {
		return fmt.Errorf("operator record: %w", err)
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("recorded", *module)
	}
	written, err := recording.Write(dir, cases, *failuresOnly)
	if err != nil {
		return err
	}
	if len(written) == 0 {
		fmt.Fprintf(stdout, "wrote no case file: the recorder holds no call of module %s to write\n", *module)
	}
	for _, w := range written {
		version := w.Digest
		if version == "" {
			version = "of no recorded version"
		}
		fmt.Fprintf(stdout, "wrote %d case files of module %s %s to %s\n", w.Files, *module, version, w.Dir)
	}
	return nil
}

// bearerToken is the token of the flags, $WASMRECONCILE_TOKEN, or the
// kubeconfig's; "" when there is none.
func bearerToken(token, file string) (string, error) {
	switch {
	case token != "":
		return token, nil
	case os.Getenv("WASMRECONCILE_TOKEN") != "":
		return os.Getenv("WASMRECONCILE_TOKEN"), nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if cfg, err := ctrl.GetConfig(); err == nil {
		if cfg.BearerToken != "" {
			return cfg.BearerToken, nil
		}
		if cfg.BearerTokenFile != "" {
			b, err := os.ReadFile(cfg.BearerTokenFile)
			if err == nil {
				return strings.TrimSpace(string(b)), nil
			}
		}
	}
	return "", nil
}

const replayUsage = `Usage: operator replay [flags] CASES_DIR --module NEW.wasm

Reruns recorded cases (operator record) on another version of the module,
each on a fresh instance, and reports for every call whether the new version
answers as production did, and if not how (the same comparison as a
ReconcileModule's candidate in shadow: status, children, Events, requeue,
error), with the fuel before and after. A version is served only the reads
production made (recorded.reads); a call that reads anything else is
UNKNOWN, with the read named, rather than answered NotFound. Cases without a
recorded block are skipped. Exits 0, or 1 with --fail-on-change when a call
changes or is unknown.

Flags:
`

// versionLines says which versions the recorded cases were recorded on,
// and whether the module replayed, name at digest, is another: its answers
// are compared, and its fuel differs by design.
func versionLines(cases []modtest.Case, name, digest string) []string {
	counts := map[string]int{}
	var order []string
	for _, c := range cases {
		if c.Recorded == nil {
			continue
		}
		key := c.Recorded.Module + " " + c.Recorded.Digest
		if counts[key] == 0 {
			order = append(order, key)
		}
		counts[key]++
	}
	var lines []string
	for _, key := range order {
		module, recorded, _ := strings.Cut(key, " ")
		switch {
		case module != name:
			lines = append(lines, fmt.Sprintf("%d calls recorded on module %s %s, replayed on module %s %s: another module; answers are compared as they are", counts[key], module, recorded, name, digest))
		case recorded == digest:
			lines = append(lines, fmt.Sprintf("%d calls recorded on %s %s, replayed on the same version", counts[key], module, recorded))
		default:
			lines = append(lines, fmt.Sprintf("%d calls recorded on %s %s, replayed on another version, %s: answers are compared; fuel differs by design", counts[key], module, recorded, digest))
		}
	}
	return lines
}

func runReplay(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, replayUsage); fs.PrintDefaults() }
	var lf limitFlags
	lf.register(fs)
	module := fs.String("module", "", "the version to replay the calls on (required)")
	failOnChange := fs.Bool("fail-on-change", false, "exit 1 when a call's answer changes")
	var allow stringList
	fs.Var(&allow, "allow-difference", "a response field path whose differences are expected, as in spec.candidate.allowDifferences (repeatable)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(pos) != 1 || *module == "" {
		return errors.New("operator replay: want CASES_DIR and --module NEW.wasm; see operator replay --help")
	}
	if err := compare.Allowed(allow); err != nil {
		return fmt.Errorf("--allow-difference: %w", err)
	}
	cases, err := modtest.LoadDir(pos[0])
	if err != nil {
		return err
	}
	opts, err := lf.options()
	if err != nil {
		return err
	}
	ctx := context.Background()
	m, done, err := lf.load(ctx, *module)
	if err != nil {
		return err
	}
	defer done()
	rep := recording.Replay(ctx, m, cases, opts, allow)
	for _, l := range versionLines(cases, m.Name(), m.Digest()) {
		fmt.Fprintln(stdout, l)
	}
	for _, r := range rep.Results {
		fuel := fmt.Sprintf("fuel %d → %d", r.FuelBefore, r.FuelAfter)
		if len(r.Unanswered) > 0 {
			fmt.Fprintf(stdout, "UNKNOWN  %s  (%s)\n", r.Case, fuel)
			for _, read := range r.Unanswered {
				fmt.Fprintf(stdout, "    a read the recording cannot answer: %s (production never made it; record this version's calls, or add the object to input.related and drop recorded.reads)\n", read)
			}
			continue
		}
		if !r.Changed {
			fmt.Fprintf(stdout, "SAME     %s  (%s)\n", r.Case, fuel)
			continue
		}
		fmt.Fprintf(stdout, "CHANGED  %s  (%s)\n", r.Case, fuel)
		for _, l := range r.Lines {
			fmt.Fprintf(stdout, "    %s\n", l)
		}
	}
	same, changed, skipped := rep.Same, rep.Changed, rep.Skipped
	fmt.Fprintf(stdout, "%d recorded calls replayed on %s: %d same, %d changed", same+changed+rep.Unanswered, m.Digest(), same, changed)
	if rep.Unanswered > 0 {
		fmt.Fprintf(stdout, ", %d unknown (a read the recording cannot answer)", rep.Unanswered)
	}
	if skipped > 0 {
		fmt.Fprintf(stdout, " (%d cases without a recorded block skipped)", skipped)
	}
	fmt.Fprintln(stdout)
	if (changed > 0 || rep.Unanswered > 0) && *failOnChange {
		return exitError{1}
	}
	return nil
}
