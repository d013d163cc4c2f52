//go:build race

package chunksync

const raceEnabled = true
