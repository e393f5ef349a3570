"""Weather simulators (fog, snow, wet ground, LISA rain/snow) implemented from their papers; see README.md here."""
