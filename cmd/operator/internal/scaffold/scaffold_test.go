package scaffold

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScaffoldReplacePath(t *testing.T) {
	for _, c := range []struct{ dir, sdk, want string }{
		// Inside the checkout that holds the SDK: relative, so it moves with it.
		{"/src/wr/modules/shop", "/src/wr/guest-sdk", "../../guest-sdk"},
		{"/src/wr/shop", "/src/wr/guest-sdk", "../guest-sdk"},
		// Outside: absolute.
		{"/tmp/shop", "/src/wr/guest-sdk", "/src/wr/guest-sdk"},
		{"/src/wrong/shop", "/src/wr/guest-sdk", "/src/wr/guest-sdk"},
	} {
		got, err := replacePath(c.dir, c.sdk)
		if err != nil || got != c.want {
			t.Errorf("replacePath(%s, %s) = %q, %v; want %q", c.dir, c.sdk, got, err, c.want)
		}
	}
}

func TestScaffoldFindSDK(t *testing.T) {
	root := t.TempDir()
	sdk := filepath.Join(root, "guest-sdk")
	deep := filepath.Join(root, "modules", "a", "b")
	for _, d := range []string{sdk, deep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sdk, "go.mod"), []byte("module "+SDKModule+"\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ flag, env, start, want, wantErr string }{
		{start: deep, want: sdk},                // walking up
		{start: sdk, want: sdk},                 // in the SDK itself
		{env: sdk, start: "/", want: sdk},       // the environment
		{flag: sdk, env: "/nowhere", want: sdk}, // the flag wins
		{flag: root, wantErr: "--sdk " + root + ": no go.mod of"},
		{env: root, wantErr: "$" + SDKEnv + " " + root + ": no go.mod of"},
		{start: root + "/..", wantErr: "no guest SDK found"},
	} {
		got, err := FindSDK(c.flag, c.env, c.start)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("FindSDK(%q, %q, %q) error = %v, want %q", c.flag, c.env, c.start, err, c.wantErr)
			}
		case err != nil || got != c.want:
			t.Errorf("FindSDK(%q, %q, %q) = %q, %v; want %q", c.flag, c.env, c.start, got, err, c.want)
		}
	}
}

// TestScaffoldWrite checks the files Write writes, and that it refuses to
// write into a directory that is not empty.
func TestScaffoldWrite(t *testing.T) {
	root := t.TempDir()
	sdk := filepath.Join(root, "guest-sdk")
	if err := os.MkdirAll(sdk, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sdk, "go.mod"), []byte("module "+SDKModule+"\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Name: "shop", Dir: filepath.Join(root, "modules", "shop"), SDK: sdk, CRD: true,
		For:  Kind{Group: "shop.example.com", Version: "v1", Kind: "Shop", Plural: "shops"},
		Owns: []Kind{{Version: "v1", Kind: "ConfigMap", Plural: "configmaps"}, {Group: "apps", Version: "v1", Kind: "Deployment", Plural: "deployments"}},
		RBAC: []byte("# rbac\n"), ServiceAccount: "wasmreconcile-modules/shop",
	}
	files, err := Write(opts)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, filepath.ToSlash(f.Path))
	}
	want := "go.mod main.go main_test.go testdata/cases/reconcile.yaml testdata/cases/child-failure.yaml api/v1/types.go crdgen/go.mod crdgen/v1/shop.go crds/shop.example.com_shops.yaml Makefile .gitignore api/v1/zz_generated.decode.go rbac.yaml"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("wrote %s, want %s", got, want)
	}
	gomod, _ := os.ReadFile(filepath.Join(opts.Dir, "go.mod"))
	if !strings.Contains(string(gomod), "go 1.26\n") || !strings.Contains(string(gomod), "=> ../../guest-sdk\n") {
		t.Errorf("go.mod:\n%s", gomod)
	}
	// crdgen/ is one level deeper: its replace reaches the same SDK.
	crdgenMod, _ := os.ReadFile(filepath.Join(opts.Dir, "crdgen", "go.mod"))
	if !strings.Contains(string(crdgenMod), SDKModule+" => ../../../guest-sdk\n") || !strings.Contains(string(crdgenMod), "replace shop => ../\n") {
		t.Errorf("crdgen/go.mod:\n%s", crdgenMod)
	}
	main, _ := os.ReadFile(filepath.Join(opts.Dir, "main.go"))
	for _, want := range []string{`guest.GVK("apps", "v1", "Deployment")`, `Data:       map[string]string{"message": message}`, "(&k8s.Deployment{ObjectMeta: k8s.ObjectMeta{Name: obj.Name()}", `v1.DecodeShopSpec(req.Object["spec"], "spec")`} {
		if !strings.Contains(string(main), want) {
			t.Errorf("main.go lacks %q:\n%s", want, main)
		}
	}
	if _, err := Write(opts); err == nil || !strings.Contains(err.Error(), "exists and is not empty") {
		t.Errorf("a second Write into the same directory: %v, want a refusal", err)
	}
}
