package informer

// RestartReason exposes restartReason to tests.
var RestartReason = restartReason
