"""The ``/tags`` sub-resource every standard-attribute resource has."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from netbay.api.responses import JSONResponse

from netbay.api.auth import context
from netbay.api.network.bodies import read_json
from netbay.errors import BadRequest, NotFound
from netbay.network.resource import Resource, valid_tag

_check = valid_tag  # one rule for the API and the in-process backend


def mount_tags(router: APIRouter, resource: Resource, path: str) -> None:
    def store(request: Request):  # noqa: ANN202
        return request.app.state.store

    def get_tags(request: Request, item_id: str) -> Response:
        ctx = context(request)
        with store(request).read() as s:
            obj = resource.get(s, ctx, item_id)
            return JSONResponse({"tags": resource.tags_of(s, [obj.id])[obj.id]})

    async def replace_tags(request: Request, item_id: str) -> Response:
        ctx = context(request)
        raw = await read_json(request)
        if not isinstance(raw, dict) or not isinstance(raw.get("tags"), list):
            raise BadRequest("Invalid input for tags. Reason: expected {\"tags\": [...]}.")
        tags = [_check(t) for t in raw["tags"]]
        with store(request).write() as s:
            obj = resource.get_owned(s, ctx, item_id)
            result = resource.set_tags(s, obj, tags)
            resource.record(s, obj, "update")
        return JSONResponse({"tags": result})

    async def create_tags(request: Request, item_id: str) -> Response:
        """``tag-creation``: POST adds several tags to those there, and answers the asked ones."""
        ctx = context(request)
        raw = await read_json(request)
        if not isinstance(raw, dict) or not isinstance(raw.get("tags"), list):
            raise BadRequest("Invalid input for operation: Invalid tags body.", kind="InvalidInput")
        tags = [_check(t) for t in raw["tags"]]
        with store(request).write() as s:
            obj = resource.get_owned(s, ctx, item_id)
            current = resource.tags_of(s, [obj.id])[obj.id]
            added = [t for t in dict.fromkeys(tags) if t not in current]
            if added:
                resource.set_tags(s, obj, current + added)
                resource.record(s, obj, "update")
        return JSONResponse({"tags": tags})

    def has_tag(request: Request, item_id: str, tag: str) -> Response:
        ctx = context(request)
        with store(request).read() as s:
            obj = resource.get(s, ctx, item_id)
            if tag not in resource.tags_of(s, [obj.id])[obj.id]:
                raise NotFound(f"Tag {tag} could not be found for {resource.member} {item_id}.", kind="TagNotFound")
        return Response(status_code=204)

    def add_tag(request: Request, item_id: str, tag: str) -> Response:
        ctx = context(request)
        _check(tag)
        with store(request).write() as s:
            obj = resource.get_owned(s, ctx, item_id)
            current = resource.tags_of(s, [obj.id])[obj.id]
            if tag not in current:
                resource.set_tags(s, obj, current + [tag])
                resource.record(s, obj, "update")
        return Response(status_code=201)

    def remove_tag(request: Request, item_id: str, tag: str) -> Response:
        ctx = context(request)
        with store(request).write() as s:
            obj = resource.get_owned(s, ctx, item_id)
            current = resource.tags_of(s, [obj.id])[obj.id]
            if tag not in current:
                raise NotFound(f"Tag {tag} could not be found for {resource.member} {item_id}.", kind="TagNotFound")
            resource.set_tags(s, obj, [t for t in current if t != tag])
            resource.record(s, obj, "update")
        return Response(status_code=204)

    def remove_all(request: Request, item_id: str) -> Response:
        ctx = context(request)
        with store(request).write() as s:
            obj = resource.get_owned(s, ctx, item_id)
            resource.set_tags(s, obj, [])
            resource.record(s, obj, "update")
        return Response(status_code=204)

    name = resource.member
    router.add_api_route(path + "/{item_id}/tags", get_tags, methods=["GET"], name=f"get_{name}_tags")
    router.add_api_route(path + "/{item_id}/tags", replace_tags, methods=["PUT"], name=f"replace_{name}_tags",
                         openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                             "schema": {"type": "object", "required": ["tags"], "properties": {
                                 "tags": {"type": "array", "items": {"type": "string"}}}}}}}})
    router.add_api_route(path + "/{item_id}/tags", create_tags, methods=["POST"], name=f"create_{name}_tags")
    router.add_api_route(path + "/{item_id}/tags", remove_all, methods=["DELETE"], status_code=204,
                         name=f"remove_{name}_tags")
    router.add_api_route(path + "/{item_id}/tags/{tag}", has_tag, methods=["GET"], status_code=204,
                         name=f"has_{name}_tag")
    router.add_api_route(path + "/{item_id}/tags/{tag}", add_tag, methods=["PUT"], status_code=201,
                         name=f"add_{name}_tag")
    router.add_api_route(path + "/{item_id}/tags/{tag}", remove_tag, methods=["DELETE"], status_code=204,
                         name=f"remove_{name}_tag")
