// A stand-in for monis.app/mlog, which the Go module proxy refuses (403 on every version, 2026-12-02):
// the few functions azure-workload-identity's webhook calls, over go-logr's funcr. Logging only; the
// webhook's own code is built unchanged. tools/components/components.py names it (LOCAL_MODULES).
module monis.app/mlog

go 1.25.0

require github.com/go-logr/logr v1.4.3
