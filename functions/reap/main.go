// Command reap is the scheduled sweep: expired leases, cancel grace, timeouts, retired nodes
// and stranded runs.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/startup"
	"mediator/shared/upkeep"
)

func main() {
	d := startup.Init("reap")
	lambda.Start(upkeep.Reap(d))
}
