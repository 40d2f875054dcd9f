package shard

import (
	"context"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.MainOptions{})) }

// TestProbeWithoutTheGate: the shared control plane runs without the
// ShardedListAndWatch gate (its default), and Probe says so for typed and
// unstructured lists alike (gatetest checks the gate on).
func TestProbeWithoutTheGate(t *testing.T) {
	cp := testenv.Shared(t)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	typed := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return cs.CoreV1().Namespaces().List(ctx, o)
	}
	unstructuredList := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).List(ctx, o)
	}
	for what, list := range map[string]func(context.Context, metav1.ListOptions) (runtime.Object, error){"typed": typed, "unstructured": unstructuredList} {
		on, err := Probe(context.Background(), ByUID, list)
		if err != nil || on {
			t.Errorf("%s: Probe = %v, %v; want false without the gate", what, on, err)
		}
	}
	failing := func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{LabelSelector: "!!bad"})
	}
	if _, err := Probe(context.Background(), ByUID, failing); err == nil {
		t.Error("Probe of a failing list succeeded")
	}
}
