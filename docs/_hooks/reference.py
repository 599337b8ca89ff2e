"""MkDocs hook: the CLI and config references, generated from the code at build time."""
from __future__ import annotations


def _cli() -> str:
    from neurcam_dist.cli import build_parser
    parser = build_parser()
    out = ["## neurcam", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        out += [f"## neurcam {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def _type(annotation) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "").replace("|", "\\|")


def _section(title: str, model) -> list[str]:
    rows = [f"## `{title}`", "", (model.__doc__ or "").strip().replace("\n", " "), "",
            "| field | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        default = "required" if field.is_required() else (
            "(computed)" if field.default_factory is not None else f"`{field.default!r}`")
        desc = (field.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | `{_type(field.annotation)}` | {default} | {desc} |")
    return rows + [""]


def _config() -> str:
    from neurcam_dist import config as c
    out = _section("(top level)", c.JobConfig)
    for title, model in (("data", c.DataConfig), ("model", c.ModelConfig), ("train", c.TrainConfig),
                         ("tracking", c.TrackingConfig), ("search", c.SearchConfig),
                         ("recluster", c.ReclusterConfig), ("text", c.TextConfig),
                         ("representation", c.RepresentationConfig)):
        out += _section(title, model)
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace the references' markers with the generated text."""
    if "<!-- neurcam:cli -->" in markdown:
        markdown = markdown.replace("<!-- neurcam:cli -->", _cli())
    if "<!-- neurcam:config -->" in markdown:
        markdown = markdown.replace("<!-- neurcam:config -->", _config())
    return markdown
