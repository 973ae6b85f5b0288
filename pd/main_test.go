package pd_test

import (
	"os"
	"testing"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// TestMain removes the binaries the process tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinDir()
	os.Exit(code)
}
