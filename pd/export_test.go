package pd

import "time"

// SetOverheadHook makes f receive the orchestration overhead of each request served (nil:
// none). Not safe to change while requests run.
func SetOverheadHook(f func(time.Duration)) { overheadHook = f }
