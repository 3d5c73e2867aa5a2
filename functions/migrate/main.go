// Command migrate applies the schema migrations; run it before the other functions serve. It
// builds nothing before lambda.Start: whatever fails, a deploy's custom resource gets an answer
// (upkeep.Migrator).
package main

import (
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/upkeep"
)

func main() {
	lambda.Start(upkeep.MigrateFunction(os.Getenv).Handle)
}
