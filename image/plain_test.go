package image

import (
	"reflect"
	"testing"
)

func TestClusterRuns(t *testing.T) {
	const cs = 64 << 10
	got := clusterRuns([]Range{
		{0, 512},          // first cluster
		{cs + 4096, 8192}, // second cluster, merges with the first
		{5 * cs, 2 * cs},  // clusters 5-6
		{7*cs + 100, 10},  // cluster 7, adjacent: merges
		{10 * cs, 3 * cs}, // cut at the virtual size
	}, cs, 11*cs+4096)
	want := []Range{{0, 2 * cs}, {5 * cs, 3 * cs}, {10 * cs, cs + 4096}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("clusterRuns = %v, want %v", got, want)
	}
}
