package metrics

// populateLifecycle creates a series of every lifecycle family.
func populateLifecycle() {
	m := ForMirror("up", "shadow")
	m.Sent()
	m.Dequeued()
	m.Answered(200)
	m.Dropped(MirrorQueueFull)
	r := ForRevision("up", "v1")
	r.SetPercent(90)
	r.Request(false)
	ro := ForRollout("up")
	ro.SetState(RolloutProgressing)
	ro.Event(RolloutAdvanced)
	sc := ForScaling("up")
	sc.Set(1, 1, 0, 0, 1)
	sc.Rejected(ScalingTimeout)
}
