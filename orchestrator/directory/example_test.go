package directory_test

import (
	"fmt"

	"github.com/countersign/countersign/orchestrator/directory"
)

func ExampleDirectory_ResolveApprovers() {
	d, err := directory.Parse([]byte(`
users:
  - {id: alice, groups: [finance]}
  - {id: bob, groups: [finance, treasury]}
`))
	if err != nil {
		panic(err)
	}
	ids, unknown := d.ResolveApprovers([]string{"group:finance", "carol", "group:legal"})
	fmt.Println(ids)
	fmt.Println(unknown)
	// Output:
	// [alice bob carol group:legal]
	// [group:legal]
}
