package pace

import (
	_ "embed"

	"github.com/owedhq/owed/internal/sqlfile"
)

// queriesSQL is every statement the pace runs, by name, with what each does
// and why it reads clock_timestamp(): sql/queries.sql (docs/sql.md).
//
//go:embed sql/queries.sql
var queriesSQL string

var queries = sqlfile.MustParse("internal/pace/sql/queries.sql", queriesSQL)

var (
	qReserveN            = queries.Get("ReserveN")
	qCreate              = queries.Get("Create")
	qGiveBack            = queries.Get("GiveBack")
	qPause               = queries.Get("Pause")
	qState               = queries.Get("State")
	qRecordLimitedMinute = queries.Get("RecordLimitedMinute")
	qLimitedMinutes      = queries.Get("LimitedMinutes")
	qAccountState        = queries.Get("AccountState")
	qAccountTrip         = queries.Get("AccountTrip")
	qAccountProbe        = queries.Get("AccountProbe")
	qAccountResume       = queries.Get("AccountResume")
	qAccountHold         = queries.Get("AccountHold")
	qAccountUnhold       = queries.Get("AccountUnhold")
	qTenantPause         = queries.Get("TenantPause")
	qTenantResume        = queries.Get("TenantResume")
	qPauses              = queries.Get("Pauses")
)
