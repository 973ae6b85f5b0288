package scaling

import (
	"os"
	"testing"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// TestMain removes the binaries the replica tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinDir()
	os.Exit(code)
}
