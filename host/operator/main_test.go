package operator_test

import (
	"os"
	"testing"

	"k8s.io/klog/v2"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// TestMain installs a logger for every test, so that a failure shows what
// the operator was doing.
func TestMain(m *testing.M) {
	logger := zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // client-go's reflectors log through klog

	os.Exit(m.Run())
}
