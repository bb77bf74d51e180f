"""Imports every primitive family module so that their rules register."""
