// Package recording is the author's side of the flight recorder: Fetch
// reads a running operator's recorded calls of a module as operator test
// cases (operator record), Write files them, and Replay reruns recorded
// cases on another version of the module and says which calls change, and
// how (operator replay).
package recording

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/atomicfile"
	"github.com/wasmreconcile/wasmreconcile/internal/compare"
)

// Defaults of FetchOptions.
const (
	DefaultFetchTimeout = 30 * time.Second
	DefaultMaxBytes     = 256 << 20
)

// FetchOptions say where to fetch a module's recorded calls from.
type FetchOptions struct {
	// Endpoint is the base URL of the operator's metrics server, such as
	// http://127.0.0.1:8080. Required.
	Endpoint string
	// Path is where the metrics server serves the flight recorder
	// (operator.FlightRecorderPath). Required.
	Path string
	// Module names the module. Required.
	Module string
	// Token is the bearer token; "" sends none.
	Token string
	// Timeout bounds the request. Defaults to DefaultFetchTimeout.
	Timeout time.Duration
	// MaxBytes bounds the answer. Defaults to DefaultMaxBytes.
	MaxBytes int64
	// Client makes the request. Defaults to http.DefaultClient.
	Client *http.Client
}

// Fetch reads the recorded calls of opts.Module from the operator at
// opts.Endpoint, as test cases. Its errors say what to do: a refused token
// (401), an identity that may not read the records (403), a module the
// operator does not run (404).
func Fetch(ctx context.Context, opts FetchOptions) ([]modtest.Case, error) {
	if opts.Endpoint == "" || opts.Module == "" || opts.Path == "" {
		return nil, errors.New("the endpoint, the path and the module are required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultFetchTimeout
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Client == nil {
		opts.Client = http.DefaultClient
	}
	u, err := url.Parse(strings.TrimSuffix(opts.Endpoint, "/") + opts.Path)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--endpoint %q is not an http(s) URL", opts.Endpoint)
	}
	u.RawQuery = url.Values{"module": {opts.Module}}.Encode()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+opts.Token)
	}
	resp, err := opts.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w; check --endpoint (kubectl port-forward to the operator's metrics port)", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, opts.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > opts.MaxBytes {
		return nil, fmt.Errorf("the flight recorder's answer is over %d bytes", opts.MaxBytes)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return nil, errors.New("the operator refused the token (HTTP 401); give a valid one with --token-file (kubectl create token ACCOUNT)")
	case http.StatusForbidden:
		return nil, fmt.Errorf("the token's identity may not read the flight recorder (HTTP 403); grant it get on the non-resource URL %s (a ClusterRole with nonResourceURLs)", opts.Path)
	case http.StatusNotFound:
		return nil, errors.New(strings.TrimSpace(string(body)))
	default:
		return nil, fmt.Errorf("HTTP %d from %s", resp.StatusCode, u.Redacted())
	}
	var got struct {
		Cases []modtest.Case `json:"cases"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return nil, fmt.Errorf("the answer is not the flight recorder's JSON: %w", err)
	}
	return got.Cases, nil
}

// Written is what Write filed for one version of a module.
type Written struct {
	// Digest is the version ("sha256:…"); "" for cases that name none.
	Digest string
	// Dir is where its cases are: a directory of their own per version.
	Dir string
	// Files counts the case files written there.
	Files int
}

// Write files cases under dir, one directory per version of the module
// (VersionDir: the recorder holds the calls of every version it ran, and a
// version's cases pass only on that version), each as NNN-KIND-OBJECT.yaml,
// written whole or not at all; with failuresOnly only the failed calls:
// those that did not succeed, and those whose writes the API server refused
// in part (Recorded.Refused, Recorded.ApplyError), as the recorder keeps
// them.
// It returns what it wrote, by version in the order first met.
func Write(dir string, cases []modtest.Case, failuresOnly bool) ([]Written, error) {
	var out []Written
	index := map[string]int{}
	for _, c := range cases {
		if failuresOnly && c.Recorded != nil && c.Recorded.Kind == string(protocol.Success) && len(c.Recorded.Refused) == 0 && c.Recorded.ApplyError == "" {
			continue
		}
		digest := ""
		if c.Recorded != nil {
			digest = c.Recorded.Digest
		}
		i, ok := index[digest]
		if !ok {
			i = len(out)
			index[digest] = i
			out = append(out, Written{Digest: digest, Dir: filepath.Join(dir, VersionDir(digest))})
			if err := os.MkdirAll(out[i].Dir, 0o755); err != nil {
				return out, err
			}
		}
		b, err := yaml.Marshal(c)
		if err != nil {
			return out, err
		}
		if err := atomicfile.Write(filepath.Join(out[i].Dir, fileName(out[i].Files, c.Recorded)), b); err != nil {
			return out, err
		}
		out[i].Files++
	}
	return out, nil
}

// VersionDir is the directory name of a version's cases: "sha256-" and the
// digest's first 16 hex digits; "" (dir itself) for no digest.
func VersionDir(digest string) string {
	algo, hex, ok := strings.Cut(digest, ":")
	if !ok || hex == "" {
		return unsafeChars.ReplaceAllString(digest, "-")
	}
	return unsafeChars.ReplaceAllString(algo+"-"+hex[:min(16, len(hex))], "-")
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// fileName is the i-th case's file name: its number, kind and object; a
// call that answered but whose writes the API server refused in part is
// "refused".
func fileName(i int, r *modtest.Recorded) string {
	what := "call"
	if r != nil {
		kind := r.Kind
		if kind == string(protocol.Success) && (len(r.Refused) > 0 || r.ApplyError != "") {
			kind = "refused"
		}
		what = unsafeChars.ReplaceAllString(strings.ToLower(kind+"-"+r.Object), "-")
	}
	return fmt.Sprintf("%03d-%s.yaml", i+1, what)
}

// Result is one recorded call replayed.
type Result struct {
	Case       string   // the case's name
	Changed    bool     // the new version answers otherwise
	Lines      []string // how it differs (compare.Compare)
	FuelBefore uint64   // the recorded call's fuel on a fresh instance
	FuelAfter  uint64   // the replay's
	// Unanswered are the new version's reads the recording cannot answer
	// (production never made them), as "get v1 ConfigMap ns/name": its
	// answer was not compared, since a read answered NotFound by default
	// would make a difference that is not the module's.
	Unanswered []string
}

// Report is a replay of recorded cases.
type Report struct {
	Results    []Result
	Same       int
	Changed    int
	Unanswered int // calls with a read the recording cannot answer
	Skipped    int // cases without a recorded block
}

// Replay reruns every case with a recorded block on m, each on a fresh
// instance (opts.Fresh is set), and compares the answer with the recorded
// one as a shadow does: differences at the paths of allow are expected.
// A recorded block that lists its reads (Recorded.Reads) is served only
// those; a read production never made fails for the guest, and the call
// is reported Unanswered, not compared.
func Replay(ctx context.Context, m *engine.Module, cases []modtest.Case, opts offline.Options, allow []string) Report {
	opts.Fresh = true
	var rep Report
	for _, c := range cases {
		r := c.Recorded
		if r == nil {
			rep.Skipped++
			continue
		}
		runOpts := opts
		var strict *recordedReads
		if r.Reads != nil {
			strict = newRecordedReads(r.Reads)
			runOpts.Reads = strict.wrap
		}
		o := offline.Run(ctx, m, c.Input, runOpts)
		res := Result{Case: c.Name, FuelBefore: r.ReplayFuel, FuelAfter: o.Fuel}
		if strict != nil && len(strict.unanswered) > 0 {
			res.Unanswered = strict.unanswered
			rep.Unanswered++
			rep.Results = append(rep.Results, res)
			continue
		}
		verdict, lines := compare.Compare(recordedAnswer(r), outcomeAnswer(o), allow)
		if verdict == compare.Agree {
			rep.Same++
		} else {
			rep.Changed++
			res.Changed, res.Lines = true, lines
		}
		rep.Results = append(rep.Results, res)
	}
	return rep
}

// recordedAnswer is what production answered, from a case's recorded block.
func recordedAnswer(r *modtest.Recorded) compare.Answer {
	var out []byte
	if r.Response != nil {
		out, _ = json.Marshal(r.Response)
	}
	return compare.AnswerOf(protocol.Kind(r.Kind), r.Error, out)
}

// outcomeAnswer is an offline run's answer.
func outcomeAnswer(o offline.Outcome) compare.Answer {
	kind := o.Kind()
	if kind == protocol.ReconcileFailed || kind == protocol.Success {
		return compare.AnswerOf(kind, "", o.Output)
	}
	msg := ""
	if o.Err != nil {
		msg = o.Err.Error()
	}
	return compare.Answer{Kind: kind, Err: msg}
}

// recordedReads serves a replay only the reads production made, and
// notes the others.
type recordedReads struct {
	known      map[abi.CacheRequest]bool
	unanswered []string
}

func newRecordedReads(reads []modtest.RecordedRead) *recordedReads {
	r := &recordedReads{known: map[abi.CacheRequest]bool{}}
	for _, rd := range reads {
		r.known[rd.CacheRequest] = true
	}
	return r
}

func (r *recordedReads) wrap(inner engine.CacheReader) engine.CacheReader {
	return readerFunc(func(ctx context.Context, request []byte) (abi.CacheStatus, []byte) {
		var req abi.CacheRequest
		if err := json.Unmarshal(request, &req); err != nil || r.known[req] {
			return inner.Read(ctx, request) // a malformed request fails as it did
		}
		r.unanswered = append(r.unanswered, describeRead(req))
		return abi.CacheError, []byte("operator replay: the recording holds no answer to this read (production never made it)")
	})
}

type readerFunc func(context.Context, []byte) (abi.CacheStatus, []byte)

func (f readerFunc) Read(ctx context.Context, request []byte) (abi.CacheStatus, []byte) {
	return f(ctx, request)
}

// describeRead is a read as "get v1 ConfigMap ns/name" or "list v1
// ConfigMap in ns matching app=web".
func describeRead(r abi.CacheRequest) string {
	what := r.Op + " " + r.APIVersion + " " + r.Kind
	switch {
	case r.Op == "get" && r.Namespace != "":
		return what + " " + r.Namespace + "/" + r.Name
	case r.Op == "get":
		return what + " " + r.Name
	}
	if r.Namespace != "" {
		what += " in " + r.Namespace
	} else {
		what += " in every namespace"
	}
	if r.LabelSelector != "" {
		what += " matching " + r.LabelSelector
	}
	return what
}
