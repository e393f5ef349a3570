"""Process-level runtime of a build: starting and stopping Ray, worker environment, fault injection for tests."""
