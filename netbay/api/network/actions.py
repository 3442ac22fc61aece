"""PLACEHOLDER: router add/remove interface actions."""

from fastapi import APIRouter


def mount(router: APIRouter) -> None:
    return None
