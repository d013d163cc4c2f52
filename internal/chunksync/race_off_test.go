//go:build !race

package chunksync

const raceEnabled = false
