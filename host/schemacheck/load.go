package schemacheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// crdScheme defaults and converts CustomResourceDefinitions as the API
// server does before validating one.
var crdScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiextensionsinstall.Install(s)
	return s
}()

// LoadDir reads the CustomResourceDefinitions of every *.yaml, *.yml and
// *.json file in dir (not its subdirectories), in file name order, and
// returns a Checker for them and the built-in kinds. A file may hold several
// YAML documents separated by "---". Every document must be an
// apiextensions.k8s.io/v1 CustomResourceDefinition the API server would
// accept, with a structural schema for each version; the error names the
// file and the document otherwise.
func LoadDir(dir string) (*Checker, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("no CustomResourceDefinition files (*.yaml, *.yml, *.json) in %s", dir)
	}
	return LoadFiles(files...)
}

// LoadFiles is LoadDir for the given files.
func LoadFiles(files ...string) (*Checker, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	var sources []string
	for _, f := range files {
		got, err := readCRDs(f)
		if err != nil {
			return nil, err
		}
		for _, c := range got {
			crds = append(crds, c.crd)
			sources = append(sources, c.source)
		}
	}
	return newChecker(crds, sources)
}

type sourcedCRD struct {
	crd    *apiextensionsv1.CustomResourceDefinition
	source string // "FILE" or "FILE, document N"
}

// readCRDs reads the CustomResourceDefinitions of one file.
func readCRDs(path string) ([]sourcedCRD, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs := bytes.Split(append([]byte("\n"), b...), []byte("\n---"))
	var out []sourcedCRD
	for i, doc := range docs {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		where := path
		if len(docs) > 1 {
			where = fmt.Sprintf("%s: document %d", path, i+1)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s: not valid YAML: %w", where, err)
		}
		if head.APIVersion == "" && head.Kind == "" {
			var v any
			if err := yaml.Unmarshal(doc, &v); err == nil && v == nil {
				continue // only comments
			}
		}
		if head.Kind != "CustomResourceDefinition" {
			what := "has no kind"
			if head.Kind != "" {
				what = fmt.Sprintf("is a %s (%s)", head.Kind, head.APIVersion)
			}
			return nil, fmt.Errorf("%s %s, not a CustomResourceDefinition: give only CRD files (the CRDs of the kinds the module reconciles and owns)", where, what)
		}
		if head.APIVersion != apiextensionsv1.SchemeGroupVersion.String() {
			return nil, fmt.Errorf("%s: a CustomResourceDefinition of apiVersion %q; want %s, the only version the API server serves", where, head.APIVersion, apiextensionsv1.SchemeGroupVersion)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(doc, crd); err != nil {
			return nil, fmt.Errorf("%s: not a valid CustomResourceDefinition: %w", where, err)
		}
		if err := validateCRD(crd); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, sourcedCRD{crd: crd, source: where})
	}
	return out, nil
}

// validateCRD defaults crd and validates it as the API server does when it
// is created: a CRD the cluster would refuse (a schema that is not
// structural, say) is refused here with the API server's message.
func validateCRD(crd *apiextensionsv1.CustomResourceDefinition) error {
	crdScheme.Default(crd)
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("CustomResourceDefinition %s: version %s has no schema.openAPIV3Schema; every version of an apiextensions.k8s.io/v1 CRD needs a structural schema", crd.Name, v.Name)
		}
	}
	internal := &apiextensionsinternal.CustomResourceDefinition{}
	if err := crdScheme.Convert(crd, internal, nil); err != nil {
		return fmt.Errorf("CustomResourceDefinition %s: %w", crd.Name, err)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		err := apierrors.NewInvalid(apiextensionsv1.Kind("CustomResourceDefinition"), crd.Name, errs)
		return fmt.Errorf("the API server would refuse it: %w", err)
	}
	// As the API server does once the CRD is accepted.
	crd.Status.AcceptedNames = crd.Spec.Names
	return nil
}
