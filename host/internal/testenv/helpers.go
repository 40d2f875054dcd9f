package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var namespaces atomic.Int32

// Namespace creates a namespace of its own for the calling test, so that
// tests sharing a control plane do not see each other's objects, and
// returns its name: the test's name, this process's ID and a counter, so
// that tests of the same name in two packages sharing one control plane
// get two namespaces.
func Namespace(t testing.TB, c client.Client) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("%s-%d-%d", strings.Trim(name, "-"), os.Getpid(), namespaces.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// Eventually polls cond every 20 ms until it returns nil; it fails the test
// with cond's last error after timeout. The timeout bounds a hang; it is
// not a latency goal: keep it generous, as CI runs every package under
// -race on two loaded cores.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Update gets obj, applies mutate and updates it, again from a fresh read
// on each conflict (another writer, often the operator, changed it
// meanwhile), and on the errors of a control plane coming back up. It
// fails the test on any other error or after a minute.
func Update(t testing.TB, c client.Client, obj client.Object, mutate func()) {
	t.Helper()
	update(t, c, obj, mutate, c.Update)
}

// UpdateStatus is Update for the status subresource.
func UpdateStatus(t testing.TB, c client.Client, obj client.Object, mutate func()) {
	t.Helper()
	update(t, c, obj, mutate, func(ctx context.Context, obj client.Object, _ ...client.UpdateOption) error {
		return c.Status().Update(ctx, obj)
	})
}

func update(t testing.TB, c client.Client, obj client.Object, mutate func(), write func(context.Context, client.Object, ...client.UpdateOption) error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			mutate()
			return write(context.Background(), obj)
		})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("updating %s: %v", client.ObjectKeyFromObject(obj), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
