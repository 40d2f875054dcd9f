package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// repoRoot is the checkout's root (this file is internal/controlplane/).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestVersionsMatchScript checks that the cache directory computed here is
// the one hack/controlplane.sh builds into: the same default versions.
func TestVersionsMatchScript(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "hack", "controlplane.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"K8S_VERSION": KubernetesVersion, "ETCD_VERSION": EtcdVersion} {
		m := regexp.MustCompile(name + `="\$\{` + name + `:-([^}]+)\}"`).FindSubmatch(b)
		if m == nil || string(m[1]) != want {
			t.Errorf("hack/controlplane.sh's default %s is %q, this package's %q", name, m, want)
		}
	}
}

func TestCacheAssets(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("WASMRECONCILE_CACHE", "")
	suffix := "controlplane/k8s-" + KubernetesVersion + "_etcd-" + EtcdVersion + "/bin"
	if got, want := CacheAssets(), "/home/u/.cache/wasmreconcile/"+suffix; got != want {
		t.Errorf("CacheAssets() = %s, want %s", got, want)
	}
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got, want := CacheAssets(), "/xdg/wasmreconcile/"+suffix; got != want {
		t.Errorf("with XDG_CACHE_HOME: CacheAssets() = %s, want %s", got, want)
	}
	t.Setenv("WASMRECONCILE_CACHE", "/c")
	if got, want := CacheAssets(), "/c/"+suffix; got != want {
		t.Errorf("with WASMRECONCILE_CACHE: CacheAssets() = %s, want %s", got, want)
	}
}

func TestMissingBinariesSayHowToBuildThem(t *testing.T) {
	_, err := Start(context.Background(), Options{Assets: t.TempDir()})
	if err == nil || !regexp.MustCompile("no etcd in .*: run `make controlplane` \\(or hack/controlplane.sh\\)").MatchString(err.Error()) {
		t.Errorf("Start with no binaries: %v", err)
	}
}

// TestGarbageCollectionAndNamespaces starts a control plane and checks what
// kube-controller-manager brings: a ConfigMap owned by another is deleted
// by the garbage collector when its owner is deleted (foreground and
// background), and a deleted namespace is emptied and removed. Then Stop
// leaves no process and no directory behind.
//
// The binaries come from $KUBEBUILDER_ASSETS, else the cache `make
// controlplane` fills; if they are missing, the test fails saying so.
func TestGarbageCollectionAndNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: it starts a control plane, which -short does not")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := Start(ctx, Options{
		CRDDirs:  []string{filepath.Join(repoRoot(), "examples", "crds")},
		Progress: func(line string) { t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), line) },
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("[%5.1fs] started in %s; CRDs %v", time.Since(start).Seconds(), cp.Dir(), cp.CRDs())
	dir := cp.Dir()
	stopped := false
	defer func() {
		if !stopped {
			_ = cp.Stop()
		}
	}()
	checkAttach(t, ctx, cp)
	if crds := strings.Join(cp.CRDs(), " "); !strings.Contains(crds, "webapps.examples.wasmreconcile.io widgets.examples.wasmreconcile.io") {
		t.Errorf("CRDs() = %v, want those of examples/crds, sorted", cp.CRDs())
	}
	if pids := ProcessesUsing(dir); len(pids) != 3 {
		t.Errorf("processes using %s: %v, want etcd, kube-apiserver and kube-controller-manager", dir, pids)
	}

	// The kubeconfig file works, as `kubectl` would use it.
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	// The CRDs are served.
	widgets := schema.GroupVersionResource{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Resource: "widgets"}
	if _, err := dynamic.NewForConfigOrDie(cp.RESTConfig()).Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing Widgets: %v", err)
	}

	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationForeground, metav1.DeletePropagationBackground} {
		cms := client.CoreV1().ConfigMaps("default")
		owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner-" + strings.ToLower(string(policy))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		child, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "child-" + strings.ToLower(string(policy)),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
				BlockOwnerDeletion: ptr.To(true),
			}},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, "the child "+child.Name+" ("+string(policy)+")", func() error {
			_, err := cms.Get(ctx, child.Name, metav1.GetOptions{})
			return err
		})
		waitGone(t, ctx, "the owner "+owner.Name, func() error {
			_, err := cms.Get(ctx, owner.Name, metav1.GetOptions{})
			return err
		})
		t.Logf("%s deletion: owner and child gone %s after the owner's delete", policy, time.Since(deleted).Round(time.Millisecond))
	}

	// A namespace with an object in it is emptied and removed.
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "inside"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if err := client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, "the namespace doomed", func() error {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
		return err
	})
	t.Logf("namespace deleted %s after its delete", time.Since(deleted).Round(time.Millisecond))

	stopStart := time.Now()
	if err := cp.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	stopped = true
	t.Logf("stopped in %s", time.Since(stopStart).Round(time.Millisecond))
	if pids := ProcessesUsing(dir); len(pids) != 0 {
		t.Errorf("after Stop, processes still use %s: %v", dir, pids)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after Stop, %s: %v, want it removed", dir, err)
	}
}

// waitGone polls get until it reports NotFound, failing the test after two
// minutes: the garbage collector syncs its caches after it starts, so the
// first deletion may wait for that.
func waitGone(t *testing.T, ctx context.Context, what string, get func() error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := get()
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there after 2 minutes (last get: %v)", what, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s to be deleted: %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkAttach attaches to cp as another process would: the config works
// and keeps envtest's client rate limits, kube-controller-manager is seen
// running, killing a component is refused, and Stop leaves the control
// plane to its starter.
func checkAttach(t *testing.T, ctx context.Context, cp *ControlPlane) {
	t.Helper()
	if _, err := Attach(t.TempDir()); err == nil {
		t.Error("Attach to an empty directory succeeded")
	}
	a, err := Attach(cp.Dir())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	cfg := a.RESTConfig()
	if cfg.QPS < 100 || cfg.Burst < 100 {
		t.Errorf("attached config: QPS %v, burst %d; want envtest's, not client-go's default 5", cfg.QPS, cfg.Burst)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("attached config: %v", err)
	}
	if a.Assets() != cp.Assets() || a.Kubeconfig() != cp.Kubeconfig() {
		t.Errorf("attached: assets %q kubeconfig %q, want %q %q", a.Assets(), a.Kubeconfig(), cp.Assets(), cp.Kubeconfig())
	}
	if !a.ControllerManagerRunning() {
		t.Error("attached: kube-controller-manager not seen running")
	}
	for name, f := range map[string]func() error{"KillAPIServer": a.KillAPIServer, "KillEtcd": a.KillEtcd, "StartAPIServer": a.StartAPIServer, "StartEtcd": a.StartEtcd} {
		if err := f(); err == nil || !strings.Contains(err.Error(), "another process") {
			t.Errorf("attached %s: %v, want a refusal", name, err)
		}
	}
	if err := a.Stop(); err != nil {
		t.Errorf("attached Stop: %v", err)
	}
	if _, err := os.Stat(cp.Dir()); err != nil {
		t.Errorf("the attached Stop touched the control plane: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("after the attached Stop: %v", err)
	}
}
