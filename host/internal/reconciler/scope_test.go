package reconciler_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// TestBuiltinScopesMatchDiscovery checks protocol.Builtin, the scope table
// the offline runner uses for built-in kinds, against a real API server's
// discovery: every kind it serves in a built-in group must be known, with
// the same scope.
func TestBuiltinScopesMatchDiscovery(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(testenv.Shared(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(gv.Group, "wasmreconcile.io") {
			continue // the test CRDs
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource
			}
			gk := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
			namespaced, known := protocol.Builtin.Namespaced(gk)
			switch {
			case !known:
				t.Errorf("%s: served by the API server, unknown to protocol.Builtin", gk)
			case namespaced != r.Namespaced:
				t.Errorf("%s: namespaced %v in protocol.Builtin, %v in discovery", gk, namespaced, r.Namespaced)
			}
			checked++
		}
	}
	if checked < 40 {
		t.Fatalf("only %d built-in kinds checked; discovery looks incomplete", checked)
	}
	t.Logf("%d built-in kinds agree with discovery", checked)
	if _, known := protocol.Builtin.Namespaced(schema.GroupKind{Group: "example.io", Kind: "Thing"}); known {
		t.Error("a custom kind is known to protocol.Builtin")
	}
}
