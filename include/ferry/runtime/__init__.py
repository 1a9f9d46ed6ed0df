"""The copy's runtime, on either runner: lanes' writer slots, the job's shape and its
recording, the local runner's lanes kept from cycle to cycle and its Delta recorder."""
