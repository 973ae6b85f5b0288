package modelroute

// SetPickHook makes f run in each request once the stage has judged the servers of its
// target, before the server is chosen and counted (nil: nothing).
func SetPickHook(f func()) {
	if f == nil {
		pickHook.Store(nil)
		return
	}
	pickHook.Store(&f)
}
