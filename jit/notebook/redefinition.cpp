// jit/notebook/redefinition.cpp — hiding the earlier cells' definitions of what a cell's inline
// namespace declares, before clang's code generator sees it
#include "jit/notebook/redefinition.hpp"

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/Decl.h>
#include <clang/AST/DeclCXX.h>
#include <clang/AST/DeclContextInternals.h>
#include <clang/AST/DeclTemplate.h>
#include <clang/Basic/DiagnosticSema.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendPluginRegistry.h>
#include <clang/Lex/Lexer.h>
#include <clang/Sema/Scope.h>
#include <clang/Sema/Sema.h>

#include <algorithm>
#include <unordered_set>

namespace sinter::notebook {
namespace {

using namespace clang;

constexpr llvm::StringLiteral cell_namespace_prefix = "__sinter_cell_";

bool is_cell_namespace(const DeclContext* context) {
  auto* ns = dyn_cast<NamespaceDecl>(context);
  return ns && ns->isInline() && ns->getName().starts_with(cell_namespace_prefix);
}

bool is_instantiation_or_specialization(const Decl* decl) {
  if (auto* f = dyn_cast<FunctionDecl>(decl))
    return f->isTemplateInstantiation() || f->isFunctionTemplateSpecialization();
  if (auto* c = dyn_cast<ClassTemplateSpecializationDecl>(decl))
    return c->getSpecializationKind() != TSK_Undeclared;
  if (auto* v = dyn_cast<VarTemplateSpecializationDecl>(decl))
    return v->getSpecializationKind() != TSK_Undeclared;
  return false;
}

bool is_definition(const Decl* decl) {
  if (auto* f = dyn_cast<FunctionDecl>(decl)) return f->isThisDeclarationADefinition();
  if (auto* t = dyn_cast<TagDecl>(decl)) return t->isThisDeclarationADefinition();
  if (auto* v = dyn_cast<VarDecl>(decl))
    return v->isThisDeclarationADefinition() != VarDecl::DeclarationOnly;
  if (auto* t = dyn_cast<TemplateDecl>(decl))
    return t->getTemplatedDecl() ? is_definition(t->getTemplatedDecl()) : true;
  return true;
}

/// Every declaration hidden so far (tags by their canonical declaration), and those hidden
/// since begin_redefinitions(): put back if the cell fails.
std::unordered_set<const Decl*> hidden_ever;
std::vector<NamedDecl*> hidden_in_part;

/// Whether `type` names a hidden struct, class or enum (through references, pointers, arrays
/// and template arguments): such a declaration is out of date.
bool mentions_hidden(QualType type) {
  if (type.isNull()) return false;
  type = type.getNonReferenceType();
  while (type->isPointerType() || type->isArrayType())
    type = type->isPointerType() ? type->getPointeeType()
                                 : QualType(type->getPointeeOrArrayElementType(), 0);
  const TagDecl* tag = type->getAsTagDecl();
  if (!tag) return false;
  if (hidden_ever.contains(tag->getCanonicalDecl())) return true;
  if (auto* specialization = dyn_cast<ClassTemplateSpecializationDecl>(tag))
    for (const TemplateArgument& argument : specialization->getTemplateArgs().asArray())
      if (argument.getKind() == TemplateArgument::Type && mentions_hidden(argument.getAsType()))
        return true;
  return false;
}

bool signature_mentions_hidden(NamedDecl* decl) {
  if (auto* t = dyn_cast<FunctionTemplateDecl>(decl)) decl = t->getTemplatedDecl();
  auto* function = dyn_cast<FunctionDecl>(decl);
  if (!function) return false;
  if (mentions_hidden(function->getReturnType())) return true;
  for (const ParmVarDecl* parameter : function->parameters())
    if (mentions_hidden(parameter->getType())) return true;
  return false;
}

/// Takes `hidden` out of every lookup table a later cell's lookup would search.
void hide(Sema& sema, TranslationUnitDecl* unit, NamedDecl* hidden) {
  hidden_ever.insert(hidden->getCanonicalDecl());
  hidden_in_part.push_back(hidden);
  if (StoredDeclsMap* map = unit->getPrimaryContext()->getLookupPtr()) {
    auto entry = map->find(hidden->getDeclName());
    if (entry != map->end()) entry->second.remove(hidden);
  }
  if (sema.TUScope) sema.TUScope->RemoveDecl(hidden);
  for (auto it = sema.IdResolver.begin(hidden->getDeclName()); it != sema.IdResolver.end(); ++it)
    if (*it == hidden) {
      sema.IdResolver.RemoveDecl(hidden);
      break;
    }
  // An unscoped enum's enumerators were declared beside it.
  if (auto* e = dyn_cast<EnumDecl>(hidden); e && !e->isScoped())
    for (Decl* member : e->decls())
      if (auto* named = dyn_cast<NamedDecl>(member)) hide(sema, unit, named);
}

bool is_overload_of(Sema& sema, NamedDecl* newer, NamedDecl* older) {
  auto function = [](NamedDecl* d) -> FunctionDecl* {
    if (auto* t = dyn_cast<FunctionTemplateDecl>(d)) return t->getTemplatedDecl();
    return dyn_cast<FunctionDecl>(d);
  };
  FunctionDecl *a = function(newer), *b = function(older);
  if (!a || !b || isa<FunctionTemplateDecl>(newer) != isa<FunctionTemplateDecl>(older))
    return a && b; // a template beside a plain function of the same name overloads it
  return sema.IsOverload(a, b, /*UseMemberUsingDeclRules=*/false);
}

/// The declarations named `name` that earlier cells' namespaces put in the top-level lookup
/// table (a copy: hiding one changes the table).
std::vector<NamedDecl*> cell_declarations_named(TranslationUnitDecl* unit, DeclarationName name) {
  std::vector<NamedDecl*> found;
  for (NamedDecl* decl : unit->getPrimaryContext()->lookup(name))
    if (is_cell_namespace(decl->getDeclContext())) found.push_back(decl);
  return found;
}

/// When a cell's inline namespace (cell_source.hpp wraps its declarations in one) has been
/// parsed, hides what its declarations redefine. Code the cell compiled before that point
/// already looked its names up inside its own namespace, where the new declarations are found
/// first.
class CellShadowing final : public ASTConsumer {
public:
  explicit CellShadowing(CompilerInstance& compiler) : compiler_(compiler) {}

  bool HandleTopLevelDecl(DeclGroupRef group) override {
    for (Decl* decl : group)
      if (auto* ns = dyn_cast<NamespaceDecl>(decl); ns && is_cell_namespace(ns))
        for (Decl* member : ns->decls())
          if (auto* named = dyn_cast<NamedDecl>(member); named && is_redefinable(named))
            hide_earlier(named);
    return true;
  }

private:
  static bool is_redefinable(NamedDecl* decl) {
    if (decl->isInvalidDecl() || !decl->getDeclName().isIdentifier() ||
        isa<NamespaceDecl, UsingDirectiveDecl, UsingDecl, UsingShadowDecl, NamespaceAliasDecl>(
            decl) ||
        is_instantiation_or_specialization(decl))
      return false;
    if (auto* f = dyn_cast<FunctionDecl>(decl); f && f->isExternC()) return false;
    return true;
  }

  void hide_earlier(NamedDecl* decl) {
    Sema& sema = compiler_.getSema();
    TranslationUnitDecl* unit = compiler_.getASTContext().getTranslationUnitDecl();
    for (NamedDecl* older : cell_declarations_named(unit, decl->getDeclName())) {
      if (older->getDeclContext()->getPrimaryContext() ==
          decl->getDeclContext()->getPrimaryContext())
        continue; // the same cell (its namespace reopened by a later piece)
      if (is_definition(older) && !is_definition(decl)) continue; // `struct M;` after M
      // An overload stays, unless its signature names a type redefined since (a loss
      // function of the old Model): nothing could call it, and it would make the name
      // ambiguous where it is passed as a value (compile_step(model, loss, …)).
      if (is_overload_of(sema, decl, older) && !signature_mentions_hidden(older)) continue;
      hide(sema, unit, older);
    }
  }

  CompilerInstance& compiler_;
};

class CellShadowingAction final : public PluginASTAction {
protected:
  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance& compiler,
                                                 llvm::StringRef) override {
    return std::make_unique<CellShadowing>(compiler);
  }
  bool ParseArgs(const CompilerInstance&, const std::vector<std::string>&) override { return true; }
  ActionType getActionType() override { return AddBeforeMainAction; }
};

FrontendPluginRegistry::Add<CellShadowingAction>
    cell_shadowing("sinter-cell-shadowing", "notebook cells may redefine earlier definitions");

} // namespace

void begin_redefinitions() { hidden_in_part.clear(); }

void undo_redefinitions(CompilerInstance& compiler) {
  Sema& sema = compiler.getSema();
  TranslationUnitDecl* unit = compiler.getASTContext().getTranslationUnitDecl();
  StoredDeclsMap* map = unit->getPrimaryContext()->getLookupPtr();
  for (auto it = hidden_in_part.rbegin(); it != hidden_in_part.rend(); ++it) {
    NamedDecl* decl = *it;
    hidden_ever.erase(decl->getCanonicalDecl());
    if (map) (*map)[decl->getDeclName()].prependDeclNoReplace(decl);
    if (sema.TUScope) sema.TUScope->AddDecl(decl);
    sema.IdResolver.AddDecl(decl);
  }
  hidden_in_part.clear();
}

std::string redefined_name(const Diagnostic& diagnostic) {
  switch (diagnostic.getID()) {
  case diag::err_redefinition:
  case diag::err_redefinition_different_kind:
  case diag::err_redefinition_different_type:
  case diag::err_redefinition_different_typedef:
  case diag::err_ovl_diff_return_type: break;
  default: return {};
  }
  if (diagnostic.getNumArgs() > 0) switch (diagnostic.getArgKind(0)) {
    case DiagnosticsEngine::ak_nameddecl:
      return reinterpret_cast<const NamedDecl*>(diagnostic.getRawArg(0))->getNameAsString();
    case DiagnosticsEngine::ak_declarationname:
      return DeclarationName::getFromOpaqueInteger(diagnostic.getRawArg(0)).getAsString();
    case DiagnosticsEngine::ak_identifierinfo:
      return diagnostic.getArgIdentifier(0)->getName().str();
    default: break;
    }
  // No name among the arguments: the identifier the diagnostic points at.
  if (!diagnostic.hasSourceManager() || diagnostic.getLocation().isInvalid()) return {};
  const SourceManager& sources = diagnostic.getSourceManager();
  SourceLocation where = sources.getExpansionLoc(diagnostic.getLocation());
  Token token;
  if (Lexer::getRawToken(where, token, sources, LangOptions(), /*IgnoreWhiteSpace=*/true) ||
      !token.is(tok::raw_identifier))
    return {};
  return token.getRawIdentifier().str();
}

bool hide_cell_declarations(CompilerInstance& compiler, const std::string& name) {
  Sema& sema = compiler.getSema();
  ASTContext& context = compiler.getASTContext();
  TranslationUnitDecl* unit = context.getTranslationUnitDecl();
  std::vector<NamedDecl*> earlier =
      cell_declarations_named(unit, DeclarationName(&context.Idents.get(name)));
  for (NamedDecl* older : earlier)
    hide(sema, unit, older);
  return !earlier.empty();
}

} // namespace sinter::notebook
