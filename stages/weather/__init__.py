"""Weather simulators (fog, snow, wet ground, LISA rain/snow) implemented from PHYSICS.md."""
